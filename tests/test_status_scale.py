"""The status's one-pass aggregation against the straightforward computation it replaced.

At 100,000 ranks every pass over the ranks costs (bench/bench_operator.py), so the per-rank
figures of an operation, the slowest rank and the pods of the current attempt are each found in
one pass. Here each is checked against the obvious computation (a ``max`` with a key, a sort) on
realistic results whose values all differ, in shuffled and in the API server's name order.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.status import compute as st
from ckptbench.operator.status.pods import COMPLETION_INDEX, RESTART_ATTEMPT, current_attempt
from ckptbench.workload.contract.results import figures, parts
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from ckptbench.workload.contract.results.records import OpRecord, RankOp, RankRecord, record_of
from ckptbench.workload.contract.results.summaries import OpSummary
from harness import rank_pods

WORLD = 37
SHARD = 3_000_000
NOW = datetime(2025, 11, 25, 19, 0, tzinfo=UTC)


def results(seed: int = 0, world: int = WORLD) -> list[RankResult]:
    return [rank_pods.rank_result(rank, SHARD, seed=seed) for rank in range(world)]


def records(results: list[RankResult]) -> list[RankRecord]:
    return [record_of(r) for r in results]


def summarize_op(timings: list[RankOp], total_bytes: int) -> OpSummary | None:
    """One operation's figures over ``timings``, as the summary computes them."""
    return figures.op_summary(parts.op_part(timings), total_bytes)


def straightforward(timings: list[RankOp]) -> dict[str, Any]:
    """The per-rank figures of an operation as written before the one-pass loop."""
    moving = [t for t in timings if t.bytes > 0] or list(timings)
    slowest = max(moving, key=lambda t: (t.timing.io_mean, -t.rank))
    collected = [t.timing.gc_mean for t in timings if t.timing.gc_mean is not None]
    rank0 = next((t.timing.stats for t in timings if t.rank == 0), None)
    own = max(t.timing.planning_mean + t.timing.io_mean for t in timings)
    return {
        "slowest_rank": slowest.rank,
        "slowest_rank_seconds": slowest.timing.io_mean,
        "fastest_rank_seconds": min(t.timing.io_mean for t in moving),
        "planning_mean_seconds": max(t.timing.planning_mean for t in timings),
        "gc_mean_seconds": max(collected) if collected else None,
        "rank0_mean_seconds": rank0.mean if rank0 else None,
        "own": own,
        "stall": figures.spread_of([(t.rank, s) for t in timings if (s := t.timing.blocked)]),
        "background": figures.spread_of(
            [(t.rank, s) for t in timings if (s := t.timing.background)]
        ),
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("op", ["save", "load", "delete"])
def test_one_pass_figures_equal_the_straightforward_ones(seed: int, op: figures.Operation) -> None:
    ranked = results(seed)
    random.Random(seed).shuffle(ranked)
    timings = figures.rank_ops(records(ranked), op)
    summary = summarize_op(timings, SHARD * WORLD)
    assert summary is not None
    want = straightforward(timings)
    own = want.pop("own")
    assert {k: getattr(summary, k) for k in want} == want
    assert summary.collective_overhead_seconds == round(max(0.0, summary.mean_seconds - own), 6)
    # The realistic values differ from rank to rank: the figures above are not all one rank's.
    assert summary.slowest_rank_seconds > summary.fastest_rank_seconds
    assert len({t.timing.io_mean for t in timings}) == WORLD


def test_ties_and_ranks_that_moved_nothing_as_before() -> None:
    timing = OpRecord.of(OpTiming.of([2.0, 2.0], [1.0, 1.0], [0.5, 0.5]))
    ties = [RankOp(rank, 0 if rank == 4 else 10, timing) for rank in (5, 3, 4, 9)]
    faster = RankOp(4, 0, OpRecord.of(OpTiming.of([2.0], [0.1], [0.2])))
    stalled = RankOp(
        9,
        10,
        OpRecord.of(OpTiming.of([2.0], [1.0], blocked_seconds=[0.3], background_seconds=[2])),
    )
    for timings in (ties, [*ties[:2], faster, ties[3]], [*ties[:3], stalled]):
        summary = summarize_op(timings, 100)
        assert summary is not None
        want = straightforward(timings)
        want.pop("own")
        assert {k: getattr(summary, k) for k in want} == want
    assert summarize_op([*ties[:3], stalled], 100).stall is not None  # type: ignore[union-attr]
    assert summarize_op(ties, 100).slowest_rank == 3  # type: ignore[union-attr]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_slowest_rank_as_a_max_with_a_key_finds_it(seed: int) -> None:
    ranked = results(seed)
    ranked.append(RankResult(rank=WORLD))  # timed nothing
    ranked.append(RankResult(rank=WORLD + 1, load=OpTiming.of([9.0], [0.01])))  # load only
    random.Random(seed).shuffle(ranked)

    def own(r: RankResult) -> float:
        return sum(op.io.mean for op in (r.save, r.load) if op is not None)

    timed = [r for r in ranked if r.save is not None or r.load is not None]
    want = max(timed, key=lambda r: (own(r), -r.rank)).rank
    assert figures.slowest_rank(records(ranked)) == want
    tied = [RankResult(rank=r, save=OpTiming.of([1.0], [0.5])) for r in (7, 2, 5)]
    assert figures.slowest_rank(records(tied)) == 2
    assert figures.slowest_rank(records([RankResult(rank=0)])) is None


def _pod(rank: int, attempt: int, deleting: bool = False, suffix: str = "a") -> dict[str, Any]:
    pod = rank_pods.rank_pod("bench", rank, "")
    pod["metadata"]["name"] += suffix
    pod["metadata"]["labels"][RESTART_ATTEMPT] = str(attempt)
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2025-11-25T19:00:00Z"
    return pod


def test_the_current_attempt_in_one_pass_as_filtered_then_sorted() -> None:
    pods = [_pod(r, 1) for r in range(12)] + [_pod(r, 0, suffix="old") for r in range(12)]
    pods += [_pod(3, 1, deleting=True, suffix="gone"), _pod(5, 1, suffix="b")]
    unranked = _pod(0, 1, suffix="x")
    del unranked["metadata"]["annotations"]
    pods.append(unranked)
    random.Random(3).shuffle(pods)
    got = [(p.name, p.rank) for p in current_attempt(pods)]
    kept = [
        p
        for p in pods
        if p["metadata"]["labels"][RESTART_ATTEMPT] == "1"
        and "deletionTimestamp" not in p["metadata"]
    ]

    def rank(p: dict[str, Any]) -> int | None:
        index = (p["metadata"].get("annotations") or {}).get(COMPLETION_INDEX)
        return int(index) if index is not None else None

    def key(p: dict[str, Any]) -> tuple[int, str]:
        r = rank(p)
        return (r if r is not None else 1 << 62, p["metadata"]["name"])

    assert got == [(p["metadata"]["name"], rank(p)) for p in sorted(kept, key=key)]
    assert got[-1][1] is None  # the pod with no completion index last
    # Only deleting pods in the latest attempt: none is current, as before.
    assert current_attempt([_pod(0, 0), _pod(1, 2, deleting=True)]) == []


def test_the_status_does_not_depend_on_the_order_pods_are_listed_in() -> None:
    world = 24
    spec = CheckpointBenchmarkSpec(  # 75 tensors of 40,000 bytes a rank: SHARD, as reported
        world_size=world, layer_size=10, padding_size=75 * world, checkpoint_path="gs://bucket/x"
    )
    pods = [
        rank_pods.rank_pod("bench", r.rank, r.to_termination_message()) for r in results(5, world)
    ]
    jobset = {"metadata": {"name": "bench"}, "spec": {}, "status": {}}
    by_rank = st.compute_status(spec, jobset, pods, None, NOW)
    by_name = st.compute_status(spec, jobset, rank_pods.listed(pods), None, NOW)
    assert by_name == by_rank
    assert by_rank.phase == "Succeeded" and by_rank.ranks_reported == world
    # What the operator read: the messages, as the workers wrote them (rounded, samples listed).
    sent = [r.to_termination_message() for r in results(5, world)]
    read = [RankResult.from_termination_message(text) for text in sent]
    summary = figures.summarize(read, world, spec.total_bytes)
    assert by_rank.slowest_rank == figures.slowest_rank(records(read))
    assert by_rank.save is not None and summary.save is not None
    assert by_rank.save.slowest_rank == summary.save.slowest_rank
    assert by_rank.save.mean_seconds == summary.save.mean_seconds
    # Every message kept its samples (rank 0's too, the longest): per-sample figures, as a run has.
    assert max(len(text) for text in sent) == len(sent[0]) < 4096
    assert by_rank.save.seconds == summary.save.seconds and summary.save.seconds is not None


def test_the_container_that_carries_the_message_is_read() -> None:
    message = results(1, 1)[0].to_termination_message()
    pod = rank_pods.rank_pod("bench", 0, message)
    statuses = pod["status"]["containerStatuses"]
    sidecar = {"name": "sidecar", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    pod["status"]["containerStatuses"] = [sidecar, *statuses]
    spec = CheckpointBenchmarkSpec(
        world_size=1, layer_size=10, padding_size=75, checkpoint_path="gs://bucket/x"
    )
    jobset = {"metadata": {"name": "bench"}, "spec": {}, "status": {}}
    status = st.compute_status(spec, jobset, [pod], None, NOW)
    assert status.ranks_reported == 1 and status.unreadable_result_count is None
