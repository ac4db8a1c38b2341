"""The reconcilers' shared scheduling: requests made before a reconcile starts join it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ckptbench.operator.runtime.coalesce import Coalescing


@dataclass
class Recording(Coalescing):
    calls: list[tuple[str, str, str]] = field(default_factory=list)

    async def reconcile(self, namespace: str, name: str, handler: str) -> None:
        self.calls.append((namespace, name, handler))


async def test_a_burst_of_requests_costs_one_reconcile_per_object() -> None:
    queue = Recording(debounce_seconds=0)
    for _ in range(5):
        queue.request("ns", "a", "pod")
    queue.request("ns", "b", "jobset")
    await asyncio.gather(*queue._tasks)
    assert queue.calls == [("ns", "a", "pod"), ("ns", "b", "jobset")]
    # Once the reconcile started, a new request asks for another one.
    queue.request("ns", "a", "pod")
    await asyncio.gather(*queue._tasks)
    assert queue.calls[-1] == ("ns", "a", "pod") and len(queue.calls) == 3


async def test_close_cancels_what_waits() -> None:
    queue = Recording(debounce_seconds=60)
    queue.request("ns", "a", "pod")
    await queue.close()
    assert queue.calls == [] and all(task.done() for task in queue._tasks)
