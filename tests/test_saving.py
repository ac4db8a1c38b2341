"""Save modes and stagers, in this process (one rank, no process group, real DCP on a folder):
the stall is taken when the call returns, the upload's result is checked, DefaultStager's
options reach DCP, and options a CPU node cannot honour are refused by name."""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from ckptbench.workload.contract.choices import SaveMode, Stager
from ckptbench.workload.rank import loop, saving
from ckptbench.workload.rank.failures import AsyncSaveError
from ckptbench.workload.storage import session
from tests.workers import one_rank

UPLOAD_SECONDS = 0.6


class _SlowWriter(FileSystemWriter):
    """A file writer whose upload takes UPLOAD_SECONDS longer, or fails after it."""

    fail = False

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        time.sleep(UPLOAD_SECONDS)  # on DCP's upload thread: the call has returned by now
        if self.fail:
            raise OSError("the bucket went away")
        return super().write_data(plan, planner)


def _slow_writers(monkeypatch: pytest.MonkeyPatch, *, fail: bool = False) -> None:
    def writer(self: session.StorageSession, checkpoint_id: str) -> FileSystemWriter:
        w = _SlowWriter(checkpoint_id)
        w.fail = fail
        return w

    monkeypatch.setattr(session.StorageSession, "writer", writer)


@pytest.mark.parametrize(
    "settings",
    [
        {"async_save": True},
        {"save_mode": "thread", "stager": "default"},
        {"save_mode": "thread", "stager": "default", "staging_async": True},
    ],
)
def test_the_stall_ends_when_the_call_returns_not_when_the_upload_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any]
) -> None:
    _slow_writers(monkeypatch)
    config = one_rank(tmp_path, warmup_samples=0, sample_count=2, **settings)
    result = loop.run(config, log=lambda _: None)
    assert result.error is None and result.verified is True
    save = result.save
    assert save is not None and save.blocked_seconds and save.background_seconds
    assert save.seconds is not None
    for stall, background, whole in zip(
        save.blocked_seconds, save.background_seconds, save.seconds, strict=True
    ):
        assert stall < UPLOAD_SECONDS / 2 < UPLOAD_SECONDS <= background <= whole
    if settings.get("staging_async"):
        assert save.staging_seconds is not None and len(save.staging_seconds) == 2
    else:
        assert save.staging_seconds is None  # the copy ran inside the call: it is in the stall


def test_a_failing_background_upload_fails_the_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _slow_writers(monkeypatch, fail=True)
    config = one_rank(tmp_path, warmup_samples=0, save_mode="thread")
    result = loop.run(config, log=lambda _: None)
    assert result.save is None and result.verified is None
    assert result.error is not None and "the bucket went away" in result.error


def test_an_upload_that_returns_no_metadata_is_not_a_save() -> None:
    upload: concurrent.futures.Future[Any] = concurrent.futures.Future()
    upload.set_result(None)
    in_flight = saving.InFlight(upload, 0.0, 0.1)
    with pytest.raises(AsyncSaveError, match="not Metadata"):
        in_flight.wait(1.0)


def test_default_stager_gets_the_chosen_options(tmp_path: Path) -> None:
    config = one_rank(
        tmp_path,
        save_mode="thread",
        stager="default",
        staging_shared_memory=True,
        staging_async=True,
    )
    options = saving.staging_options(config)
    assert options.use_shared_memory and options.use_async_staging
    assert not options.use_pinned_memory and not options.use_non_blocking_copy
    saver = saving.Saver(config, None)
    try:
        assert saver.stager is not None and saver.mode is SaveMode.THREAD
    finally:
        saver.close()
    assert saving.Saver(one_rank(tmp_path, save_mode="thread"), None).stager is None


@pytest.mark.parametrize(
    ("field", "reason"),
    [("staging_pinned_memory", "CUDA runtime"), ("staging_non_blocking_copy", "accelerator")],
)
def test_options_a_cpu_node_cannot_honour_are_refused_by_name(
    tmp_path: Path, field: str, reason: str
) -> None:
    with pytest.raises(ValidationError, match=reason) as info:
        one_rank(tmp_path, save_mode="thread", stager="default", **{field: True})
    assert field in str(info.value)


def test_async_save_still_means_the_thread_checkpointer(tmp_path: Path) -> None:
    assert one_rank(tmp_path, async_save=True).saving is SaveMode.THREAD
    assert one_rank(tmp_path).saving is SaveMode.SYNC
    recorded = one_rank(tmp_path, async_save=True).record()
    assert recorded["save_mode"] == "thread" and "async_save" not in recorded
    assert "async_save" not in one_rank(tmp_path, save_mode="process").record()
    with pytest.raises(ValidationError, match="save_mode: sync contradicts async_save"):
        one_rank(tmp_path, async_save=True, save_mode="sync")


def test_staging_options_need_the_default_stager(tmp_path: Path) -> None:
    with pytest.raises(
        ValidationError, match=r"stager: must be default with .*staging_async.*got stager=blocking"
    ):
        one_rank(tmp_path, save_mode="thread", staging_async=True)
    assert one_rank(tmp_path, save_mode="process", stager="default").stager is Stager.DEFAULT


@pytest.mark.parametrize(
    "sync", [{}, {"save_mode": "sync"}, {"async_save": False}], ids=["unset", "save_mode", "async"]
)
def test_the_default_stager_with_a_sync_save_is_refused_by_name(
    tmp_path: Path, sync: dict[str, object]
) -> None:
    """dcp.save stages nothing: a stager chosen beside it would be ignored, and the result would
    say it ran."""
    with pytest.raises(ValidationError, match=r"stager: cannot be default with a sync save"):
        one_rank(tmp_path, stager="default", **sync)
    assert one_rank(tmp_path, stager="default", async_save=True).stager is Stager.DEFAULT


def test_staging_runs_from_the_call_and_the_background_from_the_return() -> None:
    """An async save called 20 s ago that returned 10 s ago (a 10 s stall), whose staging copy
    and upload end now: staging took 20 s from the call, the background 10 s from the return
    (not the 20 s since the call: the stall is not counted twice)."""
    staged: concurrent.futures.Future[Any] = concurrent.futures.Future()
    upload: concurrent.futures.Future[Any] = concurrent.futures.Future()
    response = AsyncSaveResponse(staging_completion=staged, upload_completion=upload)
    now = time.perf_counter()
    in_flight = saving.InFlight(response, now - 20.0, now - 10.0)
    staged.set_result(None)
    upload.set_result(Metadata(state_dict_metadata={}))
    times = in_flight.wait(timeout=5.0)
    # The futures completed just above; the margin only covers a descheduled test process.
    assert times.stall == pytest.approx(10.0)
    assert times.staging == pytest.approx(20.0, abs=4.0)
    assert times.background == pytest.approx(10.0, abs=4.0)
