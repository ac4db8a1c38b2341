"""A sweep's cell rows carry the figures a user compares cells by (issues 20 and 23): delete time,
read amplification, peak RSS (the rank's and the checkpointer's), the async stall and the
checkpoint overhead, each read from the child benchmark's status as the operator computed it.

The children here are real statuses (compute_status over ranks' termination messages), so a row
reading a key the benchmark's status does not write fails.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.status_schema import status_body
from ckptbench.operator.status.compute import compute_status
from ckptbench.operator.sweep import cells as sc
from ckptbench.operator.sweep import status as sst
from ckptbench.operator.sweep.model import parse_sweep
from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.results import figures
from ckptbench.workload.contract.results.rank import OpStats, OpTiming, RankResult, TrainTiming
from harness import rank_pods

NOW = datetime(2025, 11, 25, 20, 0, tzinfo=UTC)
WORLD = 3
SPEC = CheckpointBenchmarkSpec(
    world_size=WORLD, layer_size=10, padding_size=WORLD, checkpoint_path="gs://bucket/sweep"
)
SPEC_SHARD = sizes.shard_bytes(0, WORLD, 10, WORLD)
GRID = {
    "template": {"layerSize": 10, "paddingSize": 4, "checkpointPath": "gs://bucket/sweep"},
    "axes": {"backend": ["gcs", "gcsfs"], "threads": [4, 16]},
}


def _sync(seed: int) -> list[RankResult]:
    # The bytes SPEC gives each rank: a result that reports others is unreadable.
    return [rank_pods.rank_result(r, SPEC_SHARD, seed=seed) for r in range(WORLD)]


def _async_trained(seed: int) -> list[RankResult]:
    """Thread saves beside a training step, checkpoints kept (no delete), a checkpointer peak."""
    out = []
    for r, base in enumerate(_sync(seed)):
        stall = 0.1 + r / 10 + seed / 100
        save = OpTiming.of(
            [2.0 + r], [1.5 + r], blocked_seconds=[stall, stall * 2], background_seconds=[1.7]
        )
        train = TrainTiming(
            every=10, matrix=256, step_threads=1, cpus=2, step=OpStats.of([0.1, 0.11]),
            in_flight_step=OpStats.of([0.13]), in_flight_steps=4, wait=OpStats.of([0.2]),
            stall=OpStats.of([stall]), overhead=OpStats.of([0.01 * (r + 1), 0.02 * (r + 1)]),
        )  # fmt: skip
        update = {"save": save, "delete": None, "train": train}
        out.append(base.model_copy(update={**update, "checkpointer_peak_rss_bytes": 7_000 + r}))
    return out


def _child(ranks: list[RankResult]) -> dict[str, Any]:
    pods = [rank_pods.rank_pod("c", r.rank, r.to_termination_message()) for r in ranks]
    jobset = {"metadata": {"name": "c"}, "spec": {}, "status": {}}
    return {"status": status_body(compute_status(SPEC, jobset, pods, None, NOW))}


def _summary(ranks: list[RankResult]) -> Any:
    read = [RankResult.from_termination_message(r.to_termination_message()) for r in ranks]
    return figures.summarize(read, WORLD, SPEC.total_bytes)


SYNC, ASYNC = _sync(1), _async_trained(2)
CHILDREN = {1: _child(SYNC), 2: _child(ASYNC), 3: {"status": {"phase": "Failed"}}}
S1, S2 = _summary(SYNC), _summary(ASYNC)
RAM = 2**20


@pytest.mark.parametrize(
    ("cell", "key", "expected"),
    [
        (1, "deleteSeconds", S1.delete.mean_seconds),
        (1, "readAmplification", S1.load.read_amplification),
        (1, "peakRssBytes", S1.resources.max_peak_rss_bytes),
        (1, "checkpointerPeakRssBytes", None),
        (1, "stallSeconds", None),
        (1, "overhead", None),
        (2, "deleteSeconds", None),  # checkpoints kept
        (2, "readAmplification", S2.load.read_amplification),
        (2, "peakRssBytes", S2.resources.max_peak_rss_bytes),
        (2, "checkpointerPeakRssBytes", 7_002),
        (2, "stallSeconds", S2.save.stall.slowest_rank_seconds),
        (2, "overhead", S2.train.overhead),
        (3, "deleteSeconds", None),  # failed before it reported
        (3, "peakRssBytes", None),
        (4, "stallSeconds", None),  # not started
        (4, "readAmplification", None),
    ],
)
def test_each_cell_row_shows_its_benchmarks_figures(cell: int, key: str, expected: Any) -> None:
    status = status_body(sst.sweep_status("g", sc.expand(parse_sweep(GRID)), CHILDREN, False))
    row = status["cells"][cell - 1]
    assert row["cell"] == cell
    assert row.get(key) == expected


def test_the_figures_differ_between_cells_and_are_the_ones_compared() -> None:
    status = status_body(sst.sweep_status("g", sc.expand(parse_sweep(GRID)), CHILDREN, False))
    one, two = status["cells"][:2]
    assert one["peakRssBytes"] != two["peakRssBytes"]
    assert one["readAmplification"] != two["readAmplification"]
    assert S2.save.stall.slowest_rank_seconds != S2.save.stall.mean_seconds  # the slowest rank's
    assert two["stallSeconds"] == pytest.approx(0.48)  # rank 2's: (0.32 + 0.64) / 2
    assert 0 < two["overhead"] < 1 and one["deleteSeconds"] > 0
    assert one["peakRssBytes"] >= RAM
