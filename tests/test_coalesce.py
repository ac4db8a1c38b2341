"""The reconcilers' shared scheduling: requests made before a reconcile starts join it, and a
deleted object's bookkeeping goes with it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ckptbench.operator.runtime.coalesce import Coalescing
from ckptbench.operator.runtime.sweeps import SweepReconciler


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


class NoSweeps:
    """A sweep API in which the sweep is already gone, as when its deletion is seen."""

    def get_sweep(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def list_sweep_children(self, namespace: str, sweep: str) -> list[dict[str, Any]]:
        return []

    def create_benchmark(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        raise AssertionError("a gone sweep creates nothing")

    def delete_benchmark(self, namespace: str, name: str) -> None:
        raise AssertionError("a gone sweep owns nothing")

    def patch_sweep_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        raise AssertionError("a gone sweep has no status")


async def test_a_deleted_sweep_is_forgotten() -> None:
    sweeps = SweepReconciler(api=NoSweeps())
    for i in range(20):
        await sweeps.reconcile("ns", f"s{i}", "create")
        assert ("ns", f"s{i}") in sweeps._locks
        await sweeps.deleted("ns", f"s{i}", "uid")
    assert sweeps._locks == {}
