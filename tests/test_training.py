"""The training step beside the saves: the overhead formula, and the phase run on one rank."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from ckptbench.workload.contract.settings import TRAIN_MATRIX_MIN, TRAIN_TARGET_MATRIX_MAX
from ckptbench.workload.rank import loop, training
from ckptbench.workload.storage import session
from tests.workers import one_rank

UPLOAD_SECONDS = 0.3


def test_overhead_counts_wait_stall_and_extra_step_time_over_the_interval() -> None:
    interval = training.Interval(wait=0.5, stall=0.25, steps=[1.0, 1.5, 0.75, 1.0])
    # extra = 0.5 (only steps slower than the baseline count); (0.5 + 0.25 + 0.5) / (4 * 1.0)
    assert interval.overhead(1.0) == pytest.approx(0.3125)


def _cubic(seconds_per_cell: float) -> Callable[[int], float]:
    """A machine whose step takes ``seconds_per_cell`` x N^3 (a matrix product's work) plus a
    fixed 0.3 ms (not all of a step grows with N^3: one round of the search is not enough)."""
    return lambda side: 3e-4 + seconds_per_cell * side**3


@pytest.mark.parametrize("target", [0.002, 0.02, 0.2])
def test_a_step_time_target_finds_a_matrix_that_takes_about_that_long(target: float) -> None:
    # On a machine of known speed, not this one's under load: the search lands within a few
    # percent of the target, and a larger target takes a larger matrix.
    timed = _cubic(1e-9)
    side = training.matrix_for(target, timed=timed)
    assert TRAIN_MATRIX_MIN <= side <= TRAIN_TARGET_MATRIX_MAX
    assert timed(side) == pytest.approx(target, rel=0.05)
    assert training.matrix_for(target * 10, timed=timed) > side


def test_a_step_time_target_stays_within_the_matrix_bounds() -> None:
    assert training.matrix_for(1e-9, timed=_cubic(1e-9)) == TRAIN_MATRIX_MIN
    assert training.matrix_for(3600.0, timed=_cubic(1e-9)) == TRAIN_TARGET_MATRIX_MAX


def test_a_step_time_target_measures_steps_here() -> None:
    # The measured search runs and stays in bounds; how long a step takes under load is no
    # unit test's business (bench/ prints such figures).
    assert TRAIN_MATRIX_MIN <= training.matrix_for(0.002) <= TRAIN_TARGET_MATRIX_MAX


class _SlowWriter(FileSystemWriter):
    fail_after = 10**9
    made = 0

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        time.sleep(UPLOAD_SECONDS)
        if _SlowWriter.made > _SlowWriter.fail_after:
            raise OSError("the bucket went away")
        return super().write_data(plan, planner)


def _slow(monkeypatch: pytest.MonkeyPatch, fail_after: int = 10**9) -> None:
    _SlowWriter.fail_after, _SlowWriter.made = fail_after, 0

    def writer(self: session.StorageSession, checkpoint_id: str) -> FileSystemWriter:
        _SlowWriter.made += 1
        return _SlowWriter(checkpoint_id)

    monkeypatch.setattr(session.StorageSession, "writer", writer)


def test_async_saves_run_beside_the_steps_and_each_waits_for_the_previous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _slow(monkeypatch)
    config = one_rank(tmp_path, save_mode="thread", train_every=3, train_matrix=64)
    result = loop.run(config, log=lambda _: None)
    assert result.error is None and result.verified is True
    train = result.train
    assert train is not None and train.every == 3 and train.matrix == 64
    assert train.stall.n == 2 and train.wait.n == 2
    assert train.stall.max < UPLOAD_SECONDS / 2  # the call returned before the upload ended
    # Three tiny steps end long before the upload: the second save waits for the first.
    assert train.wait.min == 0.0 and train.wait.max > UPLOAD_SECONDS / 2
    assert train.in_flight_steps == 6 and train.in_flight_step is not None
    assert train.overhead.min > 0 and train.step_threads >= 1 and train.cpus >= 1
    # Every training checkpoint was durable and then removed.
    assert not list((tmp_path / "ckpt" / "run" / "checkpoints").iterdir())


def test_a_sync_save_stalls_for_the_whole_save_and_nothing_is_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _slow(monkeypatch)
    config = one_rank(tmp_path, train_every=2, train_matrix=64)
    result = loop.run(config, log=lambda _: None)
    assert result.error is None and result.train is not None
    assert result.train.stall.min >= UPLOAD_SECONDS and result.train.in_flight_steps == 0


def test_a_failing_upload_during_training_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _slow(monkeypatch, fail_after=2)  # the two samples' saves succeed, the training's fail
    config = one_rank(tmp_path, save_mode="thread", train_every=2, train_matrix=64)
    result = loop.run(config, log=lambda _: None)
    assert result.train is None
    assert result.error is not None and "the bucket went away" in result.error
