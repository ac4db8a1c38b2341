"""The ranks' garbage collection: off and tidied between operations (manual), or Python's own
(automatic), with the collections inside each timed operation measured either way."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptbench.workload.contract.choices import GarbageCollection
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.rank import loop
from ckptbench.workload.rank.process.collector import Collector
from tests.workers import one_rank


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


def _churn(n: int = 20_000) -> None:
    """Allocate (and drop) enough container objects to trigger young-generation collections."""
    for _ in range(n):
        _Node()


@pytest.fixture(autouse=True)
def _restore_gc() -> Iterator[None]:
    was, threshold = gc.isenabled(), gc.get_threshold()
    gc.enable()
    yield
    gc.set_threshold(*threshold)
    (gc.enable if was else gc.disable)()


def test_manual_turns_automatic_collection_off_and_close_restores_it() -> None:
    collector = Collector(GarbageCollection.MANUAL)
    try:
        assert not gc.isenabled()
        with collector.timed() as cost:
            _churn()
        assert (cost.collections, cost.seconds) == (0, 0.0)
    finally:
        collector.close()
    assert gc.isenabled()
    assert collector._on_collection not in gc.callbacks


def test_close_leaves_a_collector_disabled_before_disabled() -> None:
    gc.disable()
    Collector(GarbageCollection.AUTOMATIC).close()
    assert not gc.isenabled()


def test_automatic_collections_inside_a_block_are_counted_and_timed() -> None:
    collector = Collector(GarbageCollection.AUTOMATIC)
    try:
        assert gc.isenabled()
        with collector.timed() as cost:
            _churn()
        assert cost.collections > 0 and cost.seconds > 0
        # Outside any block: counted by nobody.
        _churn()
        with collector.timed() as idle:
            pass
        assert idle.collections == 0
    finally:
        collector.close()


def test_tidy_collects_cyclic_garbage_only_in_manual_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    collector = Collector(GarbageCollection.MANUAL)
    try:
        node = _Node()
        alive = weakref.ref(node)
        del node
        assert alive() is not None  # automatic collection is off: the cycle stays
        collector.tidy()
        assert alive() is None
    finally:
        collector.close()
    calls: list[tuple[object, ...]] = []

    def counted(*args: object) -> int:
        calls.append(args)
        return 0

    monkeypatch.setattr(gc, "collect", counted)
    automatic = Collector(GarbageCollection.AUTOMATIC)
    automatic.tidy()
    automatic.close()
    assert calls == []


def _config(tmp_path: Path, mode: GarbageCollection) -> WorkloadConfig:
    return one_rank(tmp_path, warmup_samples=0, garbage_collection=mode)


def test_a_rank_tidies_before_every_timed_operation_and_collects_nothing_inside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tidied: list[bool] = []
    monkeypatch.setattr(Collector, "tidy", lambda self: tidied.append(gc.isenabled()))
    gc.set_threshold(1)  # were automatic collection on, every allocation would collect
    result = loop.run(_config(tmp_path, GarbageCollection.MANUAL), log=lambda _: None)
    assert result.error is None and result.save is not None and result.load is not None
    assert result.delete is not None  # checkpoints are not kept: each is deleted, timed
    # 2 samples x (save, load, delete), automatic collection off
    assert tidied == [False] * 6
    assert result.save.gc is None and result.load.gc is None and result.delete.gc is None
    assert gc.isenabled()  # the rank gave the process its collector back


def test_a_rank_reports_automatic_collections_inside_its_operations(tmp_path: Path) -> None:
    gc.set_threshold(1)
    result = loop.run(_config(tmp_path, GarbageCollection.AUTOMATIC), log=lambda _: None)
    assert result.error is None and result.save is not None and result.load is not None
    for timing in (result.save, result.load):
        assert timing.gc is not None and timing.gc.mean > 0
        assert timing.gc_seconds is not None and len(timing.gc_seconds) == 2
        # Inside the operation: never more than the operation itself.
        assert all(g <= s for g, s in zip(timing.gc_seconds, timing.seconds or [], strict=True))


def test_a_collection_is_timed_from_its_start_to_its_end() -> None:
    def slow_start(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            time.sleep(0.05)

    collector = Collector(GarbageCollection.MANUAL)
    gc.callbacks.append(slow_start)  # after the collector's: inside its start-to-stop span
    try:
        with collector.timed() as cost:
            gc.collect()
    finally:
        gc.callbacks.remove(slow_start)
        collector.close()
    assert cost.collections == 1
    assert 0.05 <= cost.seconds < 5
