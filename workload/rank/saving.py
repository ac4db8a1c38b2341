"""How a save runs (``save_mode``), and what an async save costs the caller.

``sync`` is ``dcp.save``. ``thread`` and ``process`` are ``dcp.async_save`` with DCP's thread or
process checkpointer; the shard is first copied by the chosen stager: ``blocking`` (the storage
writer's own BlockingAsyncStager, as before) or DCP's ``DefaultStager`` with the staging options
the settings choose. One :class:`Saver` per rank keeps the stager (DefaultStager caches its
staging buffers between saves, as a training job's would) and the checkpointer process.

An async save is timed from the caller's side (docs/measurement.md, "Async saves"):

- ``stall``: from the call until it returns, taken the moment it returns, before anything waits
  for the upload (staging included when the stager copies inside the call);
- ``staging``: from the call until the staging copy is done, when it runs apart from the call
  (DefaultStager with ``staging_async``); None otherwise;
- ``background``: from the return until the upload is durable. The upload's result is always
  checked: a failed or missing upload fails the sample, it never passes as a fast save.

A ``process`` save's storage phases (planning, I/O, finish) are those the checkpointer process
timed in its copy of the writer and reported (:mod:`ckptbench.workload.storage.timing`), read
here once the upload is durable.

Completion times are taken by callbacks on the futures, so a caller that waits later (the
training step runs in between) still gets when the upload ended, not when it looked.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_saver import (
    AsyncCheckpointerType,
    AsyncSaveResponse,
)
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save

from ckptbench.workload.contract.choices import SaveMode, Stager
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.rank.failures import AsyncSaveError
from ckptbench.workload.rank.process import checkpointer_log, memory
from ckptbench.workload.storage import timing, torch_seam

CHECKPOINTERS = {
    SaveMode.THREAD: AsyncCheckpointerType.THREAD,
    SaveMode.PROCESS: AsyncCheckpointerType.PROCESS,
}


@dataclass(frozen=True)
class SaveTimes:
    """What one async save cost the caller, in seconds."""

    stall: float
    staging: float | None
    background: float
    # save_mode process: the phases the checkpointer process timed in its copy of the writer
    # (timing.TimedWriter.checkpointer_phases); None for a thread save.
    checkpointer: timing.Phases | None = None


class _Completion:
    """When a future completed (perf_counter), taken by a callback as it completes."""

    def __init__(self, future: Future[Any]) -> None:
        self.at: float | None = None
        self._done = threading.Event()
        future.add_done_callback(self._completed)

    def _completed(self, _: Future[Any]) -> None:
        self.at = time.perf_counter()
        self._done.set()


class InFlight:
    """An async save that has returned to the caller and may still be uploading."""

    def __init__(
        self,
        response: Any,
        called_at: float,
        returned_at: float,
        reporter: timing.TimedWriter | None = None,
    ) -> None:
        self.called_at = called_at
        # The writer whose copy in the checkpointer process reports its timing (process saves).
        self.reporter = reporter
        self._reported: timing.Phases | None = None
        self.returned_at = returned_at  # taken before anything waits: the stall ends here
        # dcp.async_save returns the upload future, or an AsyncSaveResponse with a staging future
        # too when the stager copies apart from the call.
        staging: Future[Any] | None = None
        if isinstance(response, AsyncSaveResponse):
            self.upload: Future[Any] = response.upload_completion
            staging = response.staging_completion
        else:
            self.upload = response
        self._uploaded = _Completion(self.upload)
        self._staged = _Completion(staging) if staging is not None else None

    @property
    def stall(self) -> float:
        return self.returned_at - self.called_at

    def wait(self, timeout: float) -> SaveTimes:
        """Wait until durable and check the upload's result; raise :class:`AsyncSaveError` if it
        failed, returned something other than DCP's Metadata, or did not end within ``timeout``.
        A process save's timing is then read from the checkpointer process's report (missing:
        :class:`timing.CheckpointerReportMissing`)."""
        try:
            times = self._durable(timeout)
        except BaseException:
            if self.reporter is not None:
                self.reporter.discard_report()
            raise
        if self.reporter is None:
            return times
        if self._reported is None:  # the report is read (and removed) once
            self._reported = self.reporter.checkpointer_phases()
        return dataclasses.replace(times, checkpointer=self._reported)

    def _durable(self, timeout: float) -> SaveTimes:
        try:
            metadata = self.upload.result(timeout=timeout)
        except TimeoutError as exc:
            raise AsyncSaveError(
                f"async save: checkpoint not durable within {timeout:.0f} s"
            ) from exc
        if not isinstance(metadata, Metadata):
            raise AsyncSaveError(
                f"async save: future returned {type(metadata).__name__}, not Metadata"
            )
        self._uploaded._done.wait(timeout)  # the callback runs just after the result is set
        durable_at = self._uploaded.at if self._uploaded.at is not None else time.perf_counter()
        staging: float | None = None
        if self._staged is not None:
            self._staged._done.wait(timeout)
            if self._staged.at is not None:
                staging = self._staged.at - self.called_at
        return SaveTimes(
            stall=self.stall,
            staging=staging,
            background=max(0.0, durable_at - self.returned_at),
        )


class Saver:
    """This rank's async saves: the stager and checkpointer the settings choose, kept for the
    run and closed at its end."""

    def __init__(self, config: WorkloadConfig, process_group: Any) -> None:
        self.mode = config.saving
        self.process_group = process_group
        self.stager: DefaultStager | None = None
        self.checkpointer_peak_rss: int | None = None  # read as the checkpointer is stopped
        if self.mode.is_async and config.stager is Stager.DEFAULT:
            self.stager = DefaultStager(staging_options(config))
        if self.mode is SaveMode.PROCESS:
            # Inherited by the checkpointer process, started on the first save: it logs into
            # the rank's log at the rank's level, not DCP's INFO lines.
            checkpointer_log.hand_down(os.environ)

    def start(self, shard: Any, writer: timing.TimedWriter) -> InFlight:
        """Call dcp.async_save; the stall is taken as it returns, before any wait."""
        called_at = time.perf_counter()
        response = dcp_async_save(
            shard,
            storage_writer=writer,
            process_group=self.process_group,
            async_checkpointer_type=CHECKPOINTERS[self.mode],
            async_stager=self.stager,
        )
        returned_at = time.perf_counter()
        reporter = writer if self.mode is SaveMode.PROCESS else None
        return InFlight(response, called_at, returned_at, reporter)

    def checkpointer_pid(self) -> int | None:
        """The process checkpointer's process id, once the first process save started it."""
        return torch_seam.checkpoint_process_pid() if self.mode is SaveMode.PROCESS else None

    def close(self) -> None:
        if self.stager is not None:
            self.stager.close()
            self.stager = None
        pid = self.checkpointer_pid()
        if pid is not None:
            self.checkpointer_peak_rss = memory.peak_rss_bytes(pid)
            torch_seam.stop_checkpoint_process()


def staging_options(config: WorkloadConfig) -> StagingOptions:
    """DefaultStager's options as the settings choose them; the two a CPU node cannot honour are
    refused when the settings are read (settings.NEEDS_CUDA), so they are always off here."""
    return StagingOptions(
        use_pinned_memory=config.staging_pinned_memory,
        use_shared_memory=config.staging_shared_memory,
        use_async_staging=config.staging_async,
        use_non_blocking_copy=config.staging_non_blocking_copy,
    )
