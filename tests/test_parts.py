"""The figures over ranks reduced part by part, and the operator's memo of the parts.

However a run's ranks are cut into parts, the summary is the same, to the last bit, as over one
part: the ranks here differ in every way a part's reduction has to carry (ranks without samples,
ranks that moved nothing, async stalls on a few ranks, garbage collections, counted reads,
resources, fewer samples on one rank, missing ranks). And a status computed with the operator's
memo equals one computed without it, while the memo reads each message once and reduces only
the parts whose results changed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.status import compute as st
from ckptbench.operator.status import pods as status_pods
from ckptbench.operator.status.memo import StatusMemo
from ckptbench.workload.contract.results import figures, parts
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from ckptbench.workload.contract.results.records import RankRecord, record_of
from ckptbench.workload.contract.results.summaries import RunSummary
from harness import rank_pods

SHARD = 3_000_000
NOW = datetime(2025, 11, 25, 19, 0, tzinfo=UTC)


def _varied(world: int, seed: int = 0) -> list[RankResult]:
    """Realistic ranks, each odd in its own way; rank 7 is missing."""
    out = []
    for rank in range(world):
        if rank == 7:
            continue
        r = rank_pods.rank_result(rank, SHARD, seed=seed)
        update: dict[str, Any] = {}
        if rank % 11 == 3 and r.save is not None:  # a message too long for its samples
            update["save"] = r.save.without_samples()
        if rank >= world - world // 4:  # outside a resharding load's world: reads nothing
            update["load_bytes"] = 0
        if rank % 13 == 5:  # an async save's stall, staging and upload on a few ranks
            update["save"] = OpTiming.of(
                [2.0 + rank / 100] * 8,
                [1.0 + rank / 50] * 8,
                blocked_seconds=[0.1 + rank / 1000] * 8,
                background_seconds=[1.5 + rank / 100] * 8,
                gc_seconds=[0.01 * rank] * 8,
            )
        if rank % 9 == 4:
            update["resources"] = None
        if rank % 17 == 6 and r.load is not None:  # one sample fewer: lists of unequal length
            load = r.load
            update["load"] = load.model_copy(
                update={
                    name: getattr(load, name)[:-1] for name in ("seconds", "started_at", "ended_at")
                }
            )
        if rank == 2:
            update["error"] = "RuntimeError: a rank that failed after its samples"
        out.append(r.model_copy(update=update) if update else r)
    return out


def _records(world: int, seed: int = 0) -> list[RankRecord]:
    return [record_of(r) for r in _varied(world, seed)]


def _summary(records: list[RankRecord], world: int) -> RunSummary:
    return figures.summarize_records(records, world, SHARD * world, world - world // 4)


@pytest.mark.parametrize("world", [40, 150])
@pytest.mark.parametrize("size", [1, 2, 5, 16, 64])
def test_the_figures_are_the_same_however_the_ranks_are_cut(
    monkeypatch: pytest.MonkeyPatch, world: int, size: int
) -> None:
    records = _records(world)
    monkeypatch.setattr(parts, "PART_RANKS", 10**9)
    whole = _summary(records, world)
    assert len(parts.cut(records)) == 1
    monkeypatch.setattr(parts, "PART_RANKS", size)
    assert len(parts.cut(records)) == len({r.rank // size for r in records})
    assert _summary(records, world) == whole
    # The odd ranks reached the figures: none of these would hold with uniform ranks.
    assert whole.save is not None and whole.load is not None
    assert whole.save.seconds is None and whole.save.stall is not None
    assert whole.load.ranks_left_out == world // 4 and whole.load.read_amplification
    assert whole.save.gc_mean_seconds is not None and whole.error_count == 1


def test_a_part_holds_the_same_ranks_whatever_the_others_reported() -> None:
    records = _records(3000)
    cut = parts.cut(records)
    assert [len(p) for p in cut] == [1023, 1024, 3000 - 2048]  # rank 7 is missing
    assert [p[0].rank for p in cut] == [0, 1024, 2048]
    assert all(r.rank // parts.PART_RANKS == i for i, p in enumerate(cut) for r in p)
    assert parts.cut([]) == []


WORLD = 40


def _spec() -> CheckpointBenchmarkSpec:
    return CheckpointBenchmarkSpec(  # 75 tensors of 40,000 bytes a rank: SHARD, as reported
        world_size=WORLD, layer_size=10, padding_size=75 * WORLD, checkpoint_path="gs://bucket/x"
    )


def _pods(
    results: list[RankResult],
    running: tuple[int, ...] = (),
    versions: dict[int, str | None] | None = None,
) -> list[dict[str, Any]]:
    """The pods as listed; ``versions`` gives some their resourceVersion (None: none)."""
    out = []
    for r in results:
        pod = rank_pods.rank_pod("bench", r.rank, r.to_termination_message())
        if r.rank in running:
            pod["status"] = {"phase": "Running", "startTime": "2025-11-25T18:00:00Z"}
        if versions and r.rank in versions:
            pod["metadata"]["resourceVersion"] = versions[r.rank]
        out.append(pod)
    return rank_pods.listed(out)


def test_a_status_with_the_memo_equals_one_without_and_costs_only_what_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(parts, "PART_RANKS", 8)  # 5 parts of 8 ranks
    read: list[str] = []
    reduced: list[int] = []
    real_read, real_part = status_pods.read_message, parts.part_of

    def reading(text: str) -> status_pods.Read:
        read.append(text)
        return real_read(text)

    def reducing(records: Any) -> parts.Part:
        reduced.append(records[0].rank // 8)
        return real_part(records)

    monkeypatch.setattr(status_pods, "read_message", reading)
    monkeypatch.setattr(parts, "part_of", reducing)
    results = [rank_pods.rank_result(rank, SHARD) for rank in range(WORLD)]
    changed = [rank_pods.rank_result(3, SHARD, seed=seed) for seed in (9, 10, 11)]
    now = [changed[0] if r.rank == 3 else r for r in results]
    later = [r for r in now if r.rank != 30]
    steps = {
        "rank 17 still running": _pods(results, running=(17,)),
        "again, nothing new": _pods(results, running=(17,)),
        "rank 17 finished": _pods(results),
        # The API server gives a pod a new resourceVersion at each write.
        "rank 3's message changed": _pods(now, versions={3: "9003"}),
        "rank 30's pod gone": _pods(later, versions={3: "9003"}),
        # A pod without a version (an emulator's): its message is compared.
        "rank 3 without a version": _pods(later, versions={3: None}),
        "its message changed again": _pods(
            [changed[1] if r.rank == 3 else r for r in later], versions={3: None}
        ),
        "and not since": _pods(
            [changed[1] if r.rank == 3 else r for r in later], versions={3: None}
        ),
    }
    want_read = [WORLD - 1, 0, 1, 1, 0, 1, 1, 0]
    want_reduced: list[set[int]] = [{0, 1, 2, 3, 4}, set(), {2}, {0}, {3}, {0}, {0}, set()]
    memo = StatusMemo()
    jobset = {"metadata": {"name": "bench"}, "spec": {}, "status": {}}
    for (step, pods), n_read, n_reduced in zip(steps.items(), want_read, want_reduced, strict=True):
        read.clear()
        reduced.clear()
        with_memo = st.compute_status(_spec(), jobset, pods, None, NOW, memo=memo)
        assert (len(read), set(reduced)) == (n_read, n_reduced), step
        assert len(reduced) == len(n_reduced), step
        assert with_memo == st.compute_status(_spec(), jobset, pods, None, NOW), step
    assert with_memo.missing_ranks == [30] and with_memo.ranks_reported == WORLD - 1
    assert len(memo.messages) == WORLD - 1  # the pod that is gone is forgotten
