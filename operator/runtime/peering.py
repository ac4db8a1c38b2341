"""Which replica leads: kopf's peering, read the way kopf reads it.

Two or more replicas of the operator join one kopf peering object (``KopfPeering`` in each watched
namespace, ``ClusterKopfPeering`` when cluster-wide), each with a priority of its own. kopf pauses
every watch of a replica that sees a live peer of a priority as high or higher, so only the
highest-priority replica's handlers run; a peer whose record was not renewed within its lifetime
counts as gone, and the next replica resumes. Equal priorities pause every replica, so each
replica takes its start time in microseconds: distinct, and the newest replica (a rolling update's
new code) leads.

kopf's pause does not reach the reconciler's own resync clock, so the resync asks
:func:`leads` of the same object first: the rule below is kopf's
(``kopf._core.engines.peering.process_peering_event``), applied to what the API server holds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

# kopf's own default for a peer that states no lifetime.
DEFAULT_LIFETIME = 60


@dataclass(frozen=True)
class Peering:
    """This replica in the peering: the object's name, its identity and priority there."""

    name: str
    identity: str
    priority: int
    lifetime: int


def start_priority() -> int:
    """A priority no other replica shares (its start time in microseconds), the newest highest."""
    return time.time_ns() // 1000


def leads(status: Mapping[str, Any], me: Peering, now: datetime) -> bool:
    """Whether kopf leaves this replica running, given the peering object's status: no other
    live peer has a priority as high as ours."""
    for identity, peer in status.items():
        if identity == me.identity or not isinstance(peer, Mapping):
            continue
        lifetime = timedelta(seconds=int(peer.get("lifetime", DEFAULT_LIFETIME)))
        lastseen = peer.get("lastseen")
        seen = datetime.fromisoformat(str(lastseen)) if lastseen else now
        if seen + lifetime > now and int(peer.get("priority", 0)) >= me.priority:
            return False
    return True


GetPeering = Callable[[str | None, str], dict[str, Any] | None]


def gate(get: GetPeering, me: Peering) -> Callable[[str | None], Awaitable[bool]]:
    """The reconciler's ``leading``: reads the peering object of a namespace (None: the cluster's)
    and applies :func:`leads`. Without the object kopf pauses nothing, and neither does this."""

    async def leading(namespace: str | None) -> bool:
        found = await asyncio.to_thread(get, namespace, me.name)
        if found is None:
            return True
        return leads(found.get("status") or {}, me, datetime.now(UTC))

    return leading
