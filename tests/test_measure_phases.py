"""Rank 0's ``.metadata`` write (DCP's ``finish``, run on the coordinator only) is part of rank 0's
own I/O time, which is what ranks are compared by (the slowest rank, the per-rank throughputs).

Three real worker processes over gloo and DCP on a local folder; the file backend's ``finish``
is made FINISH_SECONDS slower (:mod:`tests.measure_probe`), so rank 0's I/O must show it and the
other ranks' must not.
"""

from __future__ import annotations

import pytest

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results.summaries import RunSummary
from ckptbench.workload.storage import objects as objectio
from tests import measure_probe, workers
from tests.measure_probe import Rank

pytestmark = pytest.mark.timeout(180)

FINISH_SECONDS = 0.3


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[WorkloadConfig, list[Rank]]:
    tmp = tmp_path_factory.mktemp("finish")
    # Seven tensors on three ranks (3, 2, 2): rank 0 also writes the most data.
    # Automatic collection: the full collections of the manual setting (a second each on a busy
    # machine) are tested elsewhere and would only make this run longer.
    config = workers.small_config(
        str(tmp / "ckpt"),
        world_size=3,
        layer_size=100,
        padding_size=7,
        warmup_samples=1,
        garbage_collection="automatic",
    )
    probe_dir = tmp / "probe"
    probe_dir.mkdir()
    env = {
        measure_probe.ENV_DIR: str(probe_dir),
        measure_probe.ENV_SLOW_FINISH: str(FINISH_SECONDS),
    }
    ranks = workers.run(config, tmp, command=measure_probe.COMMAND, extra_env=env)
    assert [w.proc.returncode for w in ranks] == [0, 0, 0], workers.logs(ranks)
    return config, measure_probe.read_ranks(config, probe_dir)


def test_the_coordinator_s_metadata_write_is_in_its_own_io(
    run: tuple[WorkloadConfig, list[Rank]],
) -> None:
    _, ranks = run
    rank0 = ranks[0].result.save
    assert rank0 is not None and rank0.finish_seconds and rank0.io_seconds
    # Once per sample, warm-up included, and only on the coordinator.
    assert len(ranks[0].spans("finish")) == 3
    assert all(not r.spans("finish") for r in ranks[1:])
    for finish, io in zip(rank0.finish_seconds, rank0.io_seconds, strict=True):
        assert finish >= FINISH_SECONDS
        assert io >= finish + 1e-5  # its data files' writes, then .metadata
    for other in ranks[1:]:
        save = other.result.save
        assert save is not None and save.finish_seconds is None and save.io_seconds
        assert max(save.io_seconds) < FINISH_SECONDS / 2, save.io_seconds
        # The collective waits for the coordinator's finish on every rank.
        assert min(save.seconds or []) >= FINISH_SECONDS


def test_the_summary_names_the_coordinator_the_slowest_rank(
    run: tuple[WorkloadConfig, list[Rank]],
) -> None:
    config, _ = run
    summary = RunSummary.model_validate_json(
        objectio.read_text(f"{config.results_path}/summary.json")
    )
    save = summary.save
    assert save is not None and save.rank_io_seconds is not None
    assert save.slowest_rank == 0 and save.slowest_rank_seconds >= FINISH_SECONDS
    assert save.rank_io_seconds[0] >= FINISH_SECONDS > 2 * max(save.rank_io_seconds[1:])
    # Rank 0 moved its 1.2 MB in over FINISH_SECONDS: the slowest per-rank throughput is its.
    assert save.min_rank_throughput_bytes_per_second <= config.shard_bytes / FINISH_SECONDS
