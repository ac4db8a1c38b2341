"""Reconciles of one object at a time, with bursts of requests merged into one.

Shared by the benchmark and the sweep reconcilers: a world of 1000 ranks produces thousands of pod
events, and a sweep's children as many; each asks for a reconcile, but a request made while one is
already waiting joins it, so a burst costs one reconcile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, ClassVar

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)


@dataclass
class Coalescing:
    """The per-object locks, pending requests and background tasks of a reconciler.

    Subclasses implement :meth:`reconcile`; ``debounce_seconds`` is keyword-only so a subclass
    may declare its own fields without defaults.
    """

    # How the object is named in the log line of a failed background reconcile.
    LOG_KIND: ClassVar[str] = ""

    debounce_seconds: float = field(default=0.25, kw_only=True)
    _locks: dict[Key, asyncio.Lock] = field(default_factory=dict, init=False)
    _pending: set[Key] = field(default_factory=set, init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    async def reconcile(self, namespace: str, name: str, handler: str) -> object:
        raise NotImplementedError

    def lock(self, key: Key) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def request(self, namespace: str, name: str, handler: str) -> None:
        """Ask for a reconcile soon; requests arriving before it starts are merged into it."""
        key = (namespace, name)
        if key in self._pending:
            return
        self._pending.add(key)
        self.spawn(self._later(key, handler))

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background, kept until it ends and cancelled by :meth:`close`."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _later(self, key: Key, handler: str) -> None:
        await asyncio.sleep(self.debounce_seconds)
        self._pending.discard(key)
        try:
            await self.reconcile(*key, handler)
        except Exception:
            # Counted in the reconcile error metric; a later event or resync tries again.
            log.exception(
                "reconcile of %s%s/%s after a %s event failed", self.LOG_KIND, *key, handler
            )

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
