"""DCP's process checkpointer: the writer it receives pickled, its log lines, and the I/O it
times (docs/measurement.md, "Async saves")."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint import state_dict_saver

from ckptbench.workload.contract.results.rank import RankResult
from ckptbench.workload.storage import timing, traffic
from ckptbench.workload.storage.file import backend as file_backend
from tests import workers

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def process_rank(tmp_path_factory: pytest.TempPathFactory) -> workers.Worker:
    """One rank saving with DCP's process checkpointer on file, its timed samples then saves
    beside a training step: a real checkpointer process."""
    tmp = tmp_path_factory.mktemp("process")
    config = workers.small_config(
        str(tmp / "ckpt"),
        world_size=1,
        save_mode="process",
        sample_count=2,
        warmup_samples=1,
        train_every=1,
        train_matrix=32,
    )
    (rank,) = workers.run(config, tmp)
    assert rank.proc.returncode == 0, workers.logs([rank])
    return rank


def test_a_counted_file_writer_pickles_and_its_copy_counts_where_it_writes(
    tmp_path: Path,
) -> None:
    # The process checkpointer receives the writer pickled with every save: the byte counter's
    # lock made every process save on file, gcsfs and s3fs fail ("cannot pickle '_thread.lock'").
    writer = timing.timed_writer(
        traffic.count_traffic(file_backend.writer(str(tmp_path / "c"), 4000, 4000))
    )
    copy = pickle.loads(pickle.dumps(writer))
    before = traffic.TRAFFIC.sent
    with warnings.catch_warnings():  # "torch.distributed is disabled": one process here
        warnings.simplefilter("ignore", UserWarning)
        state_dict_saver.save({"t": torch.ones(1000)}, storage_writer=copy, no_dist=True)
    assert traffic.TRAFFIC.sent - before >= 4000
    assert (tmp_path / "c" / ".metadata").exists()


def test_the_checkpointer_process_logs_at_the_ranks_level_in_the_ranks_format() -> None:
    # What the checkpointer process runs first, after the rank's main module handed a level down.
    script = textwrap.dedent(
        """
        import logging
        from ckptbench.workload.rank.process import checkpointer_log
        assert checkpointer_log.install_from({"CKPTBENCH_CHECKPOINTER_LOG_LEVEL": "WARNING"})
        from torch.distributed.checkpoint import _async_process_executor as executor
        executor._init_logger(3)
        executor.logger.info("Waiting for checkpoint save request...")
        executor.logger.warning("a warning the rank must see")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        "[rank 3] checkpointer process: WARNING root: a warning the rank must see\n"
    )


def test_a_process_save_prints_none_of_dcps_info_lines(process_rank: workers.Worker) -> None:
    result = RankResult.from_termination_message(process_rank.termination_path.read_text())
    assert result.error is None and result.checkpointer_peak_rss_bytes
    stderr = process_rank.stderr
    assert "save 2/2" in stderr
    # torch's own format ("[0] <time> - root - INFO - ...") and DCP's serving loop's lines.
    assert " - INFO - " not in stderr and "checkpoint save request" not in stderr, stderr


def _save_no_dist(writer: object, state: dict[str, torch.Tensor]) -> None:
    with warnings.catch_warnings():  # "torch.distributed is disabled": one process here
        warnings.simplefilter("ignore", UserWarning)
        state_dict_saver.save(state, storage_writer=writer, no_dist=True)


def test_the_copy_a_checkpointer_writes_with_reports_its_timing_to_the_rank(
    tmp_path: Path,
) -> None:
    writer = timing.timed_writer(
        traffic.count_traffic(file_backend.writer(str(tmp_path / "c"), 40_000, 40_000))
    )
    copy = pickle.loads(pickle.dumps(writer))  # as DCP sends it to its checkpointer process
    _save_no_dist(copy, {"t": torch.ones(10_000)})
    sent_before = traffic.TRAFFIC.sent
    phases = writer.checkpointer_phases()
    assert phases == copy.phases  # what the copy measured, not the rank's (untouched) clock
    assert phases.io is not None and phases.io > 0 and phases.finish > 0
    assert phases.planning is not None and phases.planning > 0
    # Its bytes are the rank's: the payload and the coordinator's .metadata.
    assert traffic.TRAFFIC.sent - sent_before >= 40_000
    assert writer._report_path is not None and not writer._report_path.exists()


def test_a_durable_process_save_without_its_timing_fails(tmp_path: Path) -> None:
    writer = timing.timed_writer(file_backend.writer(str(tmp_path / "c"), 4000, 4000))
    pickle.dumps(writer)  # sent, but the copy never wrote (a checkpointer that timed nothing)
    with pytest.raises(timing.CheckpointerReportMissing, match="left no timing of this save"):
        writer.checkpointer_phases()


def test_a_process_saves_io_is_timed_in_the_checkpointer_not_its_background_time(
    process_rank: workers.Worker,
) -> None:
    result = RankResult.from_termination_message(process_rank.termination_path.read_text())
    save = result.save
    assert save is not None and save.io_seconds and save.background_seconds
    assert save.planning_seconds and save.finish_seconds
    for io, finish, background, planning in zip(
        save.io_seconds,
        save.finish_seconds,
        save.background_seconds,
        save.planning_seconds,
        strict=True,
    ):
        # The background time spans sending the staged copy, planning, the writes and the
        # .metadata: the checkpointer's own I/O is a part of it, not the whole.
        assert 0 < io + finish < background
        assert planning > 0 and finish > 0  # rank 0 coordinates: it writes .metadata
    # The bytes the checkpointer sent count as the rank's: every sample's shard at least.
    assert result.resources is not None
    assert result.resources.sent_bytes >= len(save.io_seconds) * result.bytes
    # Every report read and removed, the training saves' too (their timing is not used).
    assert result.train is not None and result.train.stall.n == 2
    left = list(
        Path(tempfile.gettempdir()).glob(f"ckptbench-save-timing-{process_rank.proc.pid}-*")
    )
    assert left == []


def test_the_level_variable_does_nothing_in_a_main_process() -> None:
    # Left in a shell, the runner's or the operator's environment (whose image has no torch),
    # it must not make ckptbench.cli import torch or touch logging.
    script = "import sys, ckptbench.cli; print('torch' in sys.modules)"
    env = {**os.environ, "CKPTBENCH_CHECKPOINTER_LOG_LEVEL": "WARNING"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
