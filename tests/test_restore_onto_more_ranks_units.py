"""A restore onto more ranks than saved, without processes: the summary's figures and expected
ranks, the memory plan of a rank that both saves and loads, the local plan's memory budget."""

from __future__ import annotations

import pytest

from ckptbench.workload.contract.checkpoint import memory_plan, models
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results import figures
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from ckptbench.workload.local import plan
from ckptbench.workload.local.options import UsageError

GIB = 2**30


def _rank(r: int, saved: int, loaded: int, io: float) -> RankResult:
    t = OpTiming.of([2.0], [io])
    # A rank past worldSize saved nothing and recorded no save and no delete (rank/loop.py).
    return RankResult(
        rank=r,
        bytes=saved,
        load_bytes=loaded,
        save=t if saved else None,
        load=t,
        delete=t if saved else None,
        verified=True,
    )


def test_ranks_that_saved_nothing_are_left_out_of_the_save_and_counted() -> None:
    # 2 save 100 bytes each, 4 load 50 each (a 2 -> 4 restore); rank 3 is the slowest loader.
    ranks = [_rank(0, 100, 50, 0.5), _rank(1, 100, 50, 1.0), _rank(2, 0, 50, 0.25),
             _rank(3, 0, 50, 2.0)]  # fmt: skip
    summary = figures.summarize(ranks, 2, 200, load_world_size=4)
    assert summary.world_size == 2 and summary.load_world_size == 4 and summary.rank_count == 4
    assert summary.ranks_reported == 4 and summary.missing_rank_count == 0 and summary.succeeded
    save, load, delete = summary.save, summary.load, summary.delete
    assert save is not None and load is not None and delete is not None
    assert save.ranks_left_out == 2 and delete.ranks_left_out == 2 and load.ranks_left_out == 0
    assert save.min_rank_throughput_bytes_per_second == pytest.approx(100 / 1.0)
    assert save.slowest_rank == 1 and save.rank_io_seconds == [0.5, 1.0]
    assert load.min_rank_throughput_bytes_per_second == pytest.approx(50 / 2.0)
    assert load.slowest_rank == 3 and load.fastest_rank_seconds == 0.25
    assert summary.shard_bytes == 100 and summary.load_shard_bytes == 50


def test_the_ranks_past_world_size_are_expected_to_report() -> None:
    ranks = [_rank(0, 100, 50, 0.5), _rank(1, 100, 50, 1.0), _rank(2, 0, 50, 0.25)]
    summary = figures.summarize(ranks, 2, 200, load_world_size=4)
    assert summary.missing_ranks == [3] and not summary.succeeded
    # Fewer loading ranks than saving ones expect the saving ones, as before.
    assert figures.summarize(ranks[:2], 2, 200, load_world_size=1).missing_rank_count == 0


def _model(**values: object) -> WorkloadConfig:
    return WorkloadConfig.model_validate(
        {"model": "llama3-8b", "backend": "file", "checkpoint_path": "/tmp/x", **values}
    )


def test_a_rank_that_saves_and_loads_is_planned_for_the_larger_of_the_two() -> None:
    alone = _model(world_size=4).memory_estimate()
    grow = _model(world_size=4, load_world_size=8).memory_estimate()
    shrink = _model(world_size=4, load_world_size=2).memory_estimate()
    # Loading on 8, rank 0's template is half its saved shard: its shard sizes the plan.
    spec = _model(world_size=4).model_spec
    assert spec is not None
    assert models.model_sizes(spec, 8).largest_rank_bytes < grow.shard_bytes
    assert grow.shard_bytes == alone.shard_bytes == models.model_sizes(spec, 4).largest_rank_bytes
    assert grow.peak_bytes == alone.peak_bytes
    # Loading on 2, the template is twice the shard: it sizes the plan.
    assert shrink.shard_bytes == models.model_sizes(spec, 2).largest_rank_bytes
    assert shrink.peak_bytes > alone.peak_bytes
    assert isinstance(grow, memory_plan.MemoryEstimate)


def test_the_local_plan_shares_the_machine_among_every_rank_that_runs() -> None:
    config = _model(world_size=2, load_world_size=4, layers=2)
    peak = config.memory_estimate().peak_bytes
    cell = plan.Cell("c", config, {})
    # 3 peaks would do for the 2 saving ranks alone, but 4 processes run.
    with pytest.raises(UsageError, match=r"^--load-world-size 4: .* / 4 ranks\)"):
        plan.check_memory(cell, 3 * peak)
    plan.check_memory(cell, 4 * peak)


def test_the_way_out_counts_the_loading_ranks_of_each_other_world() -> None:
    config = _model(world_size=4, load_world_size=8, layers=2)
    seven = config.model_copy(update={"world_size": 7}).memory_estimate().peak_bytes
    # Every candidate world (7 saving ranks down to 1) still runs 8 processes: with just under
    # 8 of 7's peaks none fits. Sharing the machine among the savers alone would offer 7.
    with pytest.raises(UsageError, match="no --world-size fits on this machine"):
        plan.check_memory(plan.Cell("c", config, {}), 8 * seven - 1)
    with pytest.raises(UsageError, match="--world-size 7 fits on this machine"):
        plan.check_memory(plan.Cell("c", config, {}), 8 * seven)
