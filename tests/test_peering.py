"""Whether a replica leads, by kopf's rule applied to the peering object's status."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from ckptbench.operator.runtime.peering import Peering, gate, leads, start_priority

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
ME = Peering(name="ckptbench", identity="pod-a", priority=100, lifetime=10)


def peer(priority: int, seconds_ago: float, lifetime: int = 10) -> dict[str, Any]:
    seen = (NOW - timedelta(seconds=seconds_ago)).isoformat()
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen}


def test_a_live_peer_as_high_or_higher_holds_the_replica_back() -> None:
    assert not leads({"pod-b": peer(101, 1)}, ME, NOW)
    assert not leads({"pod-b": peer(100, 1)}, ME, NOW)  # kopf pauses both on a tie


def test_lower_dead_and_own_records_do_not() -> None:
    status = {
        "pod-a": peer(100, 0),
        "pod-b": peer(99, 1),
        "pod-c": peer(500, 11),  # its lifetime of 10 s has passed: dead
        "pod-d": peer(500, 3, lifetime=2),
    }
    assert leads(status, ME, NOW)
    assert leads({}, ME, NOW)


def test_a_record_without_lastseen_counts_as_just_seen_and_without_lifetime_as_60_s() -> None:
    assert not leads({"pod-b": {"priority": 200}}, ME, NOW)
    assert not leads({"pod-b": {"priority": 200, "lastseen": peer(0, 59)["lastseen"]}}, ME, NOW)
    assert leads({"pod-b": {"priority": 200, "lastseen": peer(0, 61)["lastseen"]}}, ME, NOW)


def test_each_replica_started_later_has_a_higher_priority() -> None:
    first = start_priority()
    while (second := start_priority()) == first:
        pass
    assert second > first


def test_the_gate_reads_the_namespaces_object_and_leads_without_one() -> None:
    asked: list[tuple[str | None, str]] = []
    live = datetime.now(UTC).isoformat()

    def get(namespace: str | None, name: str) -> dict[str, Any] | None:
        asked.append((namespace, name))
        if namespace == "held":
            return {"status": {"pod-b": {"priority": 200, "lifetime": 60, "lastseen": live}}}
        return None

    leading = gate(get, ME)

    async def ask(namespace: str) -> bool:
        return await leading(namespace)

    assert asyncio.run(ask("held")) is False
    assert asyncio.run(ask("empty")) is True
    assert asked == [("held", "ckptbench"), ("empty", "ckptbench")]
