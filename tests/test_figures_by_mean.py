"""The per-rank spreads of an async save and a training run, and the delete's throughput, each
against its definition (docs/measurement.md): the slowest rank is the one with the largest
*mean* (not the largest single sample), overhead per interval is the slowest rank's *mean* (not
its median), and every operation's throughput is the checkpoint's total bytes over its mean.

The samples are chosen so that each wrong statistic picks another rank or another value: rank 1
has the largest mean of every figure, rank 0 the largest single sample, and each mean differs
from its median. Expected values come from Python's ``statistics``, not the code under test.
"""

from __future__ import annotations

import statistics

import pytest

from ckptbench.workload.contract.results import figures
from ckptbench.workload.contract.results.rank import OpStats, OpTiming, RankResult, TrainTiming
from ckptbench.workload.contract.results.summaries import RunSummary

SHARD = 1000
TOTAL = 2 * SHARD
# Per rank, samples of one figure: rank 0 has the one long sample, rank 1 the larger mean and
# the larger median.
SPIKY = [0.1, 0.1, 0.1, 0.1, 2.0]  # mean 0.48, max 2.0
STEADY = [0.7, 0.7, 0.7, 0.7, 0.7]  # mean 0.7, max 0.7
SKEWED = [0.2, 0.2, 0.2, 3.0, 3.0]  # rank 1's overhead: mean 1.32, p50 0.2, max 3.0
SAMPLES = {0: SPIKY, 1: STEADY}
OVERHEAD = {0: [0.3, 0.3, 0.3, 0.3, 4.0], 1: SKEWED}  # rank 0's: mean 1.04, p50 0.3, max 4.0


def _save(rank: int) -> OpTiming:
    n = len(SPIKY)
    return OpTiming.of(
        [1.0] * n,
        [0.5] * n,
        blocked_seconds=SAMPLES[rank],
        staging_seconds=[x / 2 for x in SAMPLES[rank]],
        background_seconds=[x * 3 for x in SAMPLES[rank]],
    )


def _delete(rank: int) -> OpTiming:
    return OpTiming.of([0.2, 0.3, 0.4, 0.9] if rank == 0 else [0.25, 0.3, 0.35, 0.5], [0.1] * 4)


def _train(rank: int) -> TrainTiming:
    s = OpStats.of
    return TrainTiming(
        every=4, matrix=64, step_threads=1, cpus=1, step=s([0.01] * 5),
        wait=s([x / 10 for x in SAMPLES[rank]]), stall=s(SAMPLES[rank]),
        overhead=s(OVERHEAD[rank]),
    )  # fmt: skip


def _summary() -> RunSummary:
    results = [
        RankResult(rank=r, bytes=SHARD, save=_save(r), delete=_delete(r), train=_train(r))
        for r in (0, 1)
    ]
    return figures.summarize(results, world_size=2, total_bytes=TOTAL)


@pytest.mark.parametrize(("name", "scale"), [("stall", 1.0), ("staging", 0.5),
                                             ("background", 3.0)])  # fmt: skip
def test_an_async_saves_slowest_rank_is_the_one_with_the_largest_mean(
    name: str, scale: float
) -> None:
    save = _summary().save
    assert save is not None
    spread = getattr(save, name)
    assert spread.slowest_rank == 1, name
    assert spread.slowest_rank_seconds == pytest.approx(statistics.mean(STEADY) * scale)
    assert spread.max_seconds == pytest.approx(max(SPIKY) * scale)  # rank 0's one long sample
    assert spread.mean_seconds == pytest.approx(
        statistics.mean([statistics.mean(SPIKY), statistics.mean(STEADY)]) * scale
    )


def test_a_training_runs_slowest_ranks_and_overhead_are_by_the_mean() -> None:
    train = _summary().train
    assert train is not None
    assert train.stall.slowest_rank == 1 and train.wait.slowest_rank == 1
    assert train.stall.slowest_rank_seconds == pytest.approx(statistics.mean(STEADY))
    # Rank 1's mean overhead is the largest though its median and its max are the least.
    assert statistics.median(SKEWED) < statistics.median(OVERHEAD[0])
    assert max(SKEWED) < max(OVERHEAD[0])
    assert train.overhead_slowest_rank == 1
    assert train.overhead == pytest.approx(statistics.mean(SKEWED))
    assert train.overhead_rank_mean == pytest.approx(
        statistics.mean([statistics.mean(OVERHEAD[0]), statistics.mean(SKEWED)])
    )
    assert train.overhead_max == max(OVERHEAD[0])


def test_the_deletes_throughput_is_the_total_bytes_over_its_mean_collective_duration() -> None:
    delete = _summary().delete
    assert delete is not None
    per_sample = [max(a, b) for a, b in zip(_delete(0).seconds or [], _delete(1).seconds or [],
                                            strict=True)]  # fmt: skip
    mean = statistics.mean(per_sample)
    assert delete.mean_seconds == pytest.approx(mean)
    assert delete.throughput_bytes_per_second == pytest.approx(TOTAL / mean, rel=1e-5)
