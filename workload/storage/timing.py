"""Per-rank phase timing, taken inside the storage layer, for every backend.

DCP's save ends with an all-reduce and its load with an all-gather, so the wall time around
``dcp.save`` is the same on every rank: it cannot tell a heavy rank from a light one. The calls
DCP makes into a StorageWriter/StorageReader can. :func:`timed_writer` and :func:`timed_reader`
wrap any writer or reader and record, for one operation on this rank:

- ``planning``: from DCP's first call into the storage layer to the start of data I/O. It spans
  the planner, the storage plan hooks and the exchange of plans between ranks (a collective);
- ``io``: ``write_data``/``read_data`` from the call until the futures they return complete;
- ``finish``: ``finish`` (the coordinator's ``.metadata`` write; zero on other ranks).

The loop keeps the collective time (barrier to barrier) around the whole operation.

DCP's process checkpointer (``save_mode`` process) writes from a second process, with a pickled
copy of the writer: the copy times its calls there and hands them back through a small report
file (:class:`CheckpointerReport`), with the bytes it sent, which the rank reads once the upload
is durable (:meth:`TimedWriter.checkpointer_phases`). The report is complete before DCP's save
returns in that process, so before the rank sees the upload done: data I/O ends in a callback
DCP waits for, and the coordinator's ``finish`` runs before the save returns.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import (
    LoadPlan,
    LoadPlanner,
    SavePlan,
    SavePlanner,
)
from torch.distributed.checkpoint.staging import AsyncStager
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

from ckptbench.workload.storage import torch_seam, traffic

S = TypeVar("S", StorageWriter, StorageReader)


@dataclass
class Phases:
    """One operation's phases on this rank, in seconds (``None``: the phase has not run)."""

    planning: float | None = None
    io: float | None = None
    finish: float = 0.0
    # A load's bytes read from storage during read_data, and the stored bytes its plan needs
    # (:mod:`ckptbench.workload.storage.traffic`): their ratio is its read amplification.
    read_bytes: int | None = None
    needed_bytes: int | None = None

    @property
    def own_io(self) -> float | None:
        """This rank's own I/O: data I/O plus its ``finish``. What ranks are compared by."""
        return None if self.io is None else self.io + self.finish


class _Clock:
    def __init__(self) -> None:
        self.phases = Phases()
        self._first_call: float | None = None

    def touch(self) -> None:
        if self._first_call is None:
            self._first_call = time.perf_counter()

    def io_started(self) -> float:
        now = time.perf_counter()
        start = self._first_call if self._first_call is not None else now
        self.phases.planning = now - start
        return now

    def io_done(self, started: float) -> None:
        self.phases.io = time.perf_counter() - started


class _Timed(Generic[S]):
    """What the timed writer and reader share: the wrapped backend, the clock, and forwarding."""

    def __init__(self, inner: S) -> None:
        self.inner: S = inner
        self._clock = _Clock()

    @property
    def phases(self) -> Phases:
        return self._clock.phases

    def __getattr__(self, name: str) -> Any:
        # Attributes DCP reads with getattr (``checkpoint_id``), and backend settings.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        self._clock.touch()
        self.inner.reset(checkpoint_id)

    def _set_up(self, method: Any, *fixed: Any, **kwargs: Any) -> None:
        # Backends written before DCP passed extra arguments take only the fixed ones.
        self._clock.touch()
        if "kwargs" in inspect.signature(method).parameters:
            method(*fixed, **kwargs)
        else:
            method(*fixed)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        # DCP asks this only when it must pick a backend itself; ours is always given.
        return False


@dataclass(frozen=True)
class CheckpointerReport:
    """What the checkpointer process's copy of a writer measured of one save, in seconds."""

    planning: float
    io: float
    finish: float
    sent_bytes: int  # what that process sent to storage during the save

    def phases(self) -> Phases:
        return Phases(planning=self.planning, io=self.io, finish=self.finish)


class CheckpointerReportMissing(RuntimeError):
    """The checkpointer process wrote no timing for a save it reported durable."""


def _report_folder() -> Path:
    # Python's temporary folder: a writable emptyDir in a pod (its root filesystem is
    # read-only), shared by the rank and its checkpointer process, which run in one container.
    return Path(tempfile.gettempdir())


class TimedWriter(_Timed[StorageWriter], StorageWriter):
    """A StorageWriter that times the calls DCP makes on ``inner`` and forwards them unchanged."""

    _report_path: Path | None = None  # set when pickled: where the copy reports its timing
    _reporting = False  # this is the copy, in the process it was sent to
    _sent_at_io: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for DCP's process checkpointer with every process save: the copy reports its
        # timing to this file, which this writer reads once the save is durable.
        if self._report_path is None:
            name = f"ckptbench-save-timing-{os.getpid()}-{uuid.uuid4().hex}.json"
            self._report_path = _report_folder() / name
        return {"inner": self.inner, "report_path": self._report_path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.inner = state["inner"]
        self._clock = _Clock()
        self._report_path = state["report_path"]
        self._reporting = True

    def _report(self) -> None:
        """In the checkpointer process: write what this save measured so far, atomically."""
        if not self._reporting or self._report_path is None or self.phases.io is None:
            return
        sent = traffic.TRAFFIC.sent - (self._sent_at_io or 0)
        report = CheckpointerReport(
            self.phases.planning or 0.0, self.phases.io, self.phases.finish, sent
        )
        partial = self._report_path.with_suffix(".partial")
        partial.write_text(json.dumps(asdict(report)))
        os.replace(partial, self._report_path)

    def checkpointer_phases(self) -> Phases:
        """In the rank, once a process save is durable: the phases the checkpointer process
        measured, its bytes sent added to this process's count. The report is then removed."""
        path = self._report_path
        if path is None:
            raise CheckpointerReportMissing(
                "the writer was never sent to a checkpointer process: nothing was timed there"
            )
        try:
            report = CheckpointerReport(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError) as exc:
            raise CheckpointerReportMissing(
                f"the checkpointer process left no timing of this save in {path}: {exc}"
            ) from exc
        finally:
            self.discard_report()
        traffic.TRAFFIC.add_sent(report.sent_bytes)
        return report.phases()

    def discard_report(self) -> None:
        if self._report_path is not None:
            with contextlib.suppress(OSError):
                self._report_path.unlink()

    def storage_meta(self) -> StorageMeta | None:
        self._clock.touch()
        return self.inner.storage_meta()

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self._set_up(self.inner.set_up_storage_writer, is_coordinator, *args, **kwargs)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        self._clock.touch()
        return self.inner.prepare_local_plan(plan)

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        return self.inner.prepare_global_plan(plans)

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        self._sent_at_io = traffic.TRAFFIC.sent
        started = self._clock.io_started()
        future = self.inner.write_data(plan, planner)

        def done(written: Future[list[WriteResult]]) -> list[WriteResult]:
            # DCP waits for the future returned here, so the I/O time is taken (and, in the
            # checkpointer process, reported) before DCP goes on; a failed write still raises.
            self._clock.io_done(started)
            self._report()
            return written.value()

        chained: Future[list[WriteResult]] = future.then(done)
        return chained

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        started = time.perf_counter()
        try:
            self.inner.finish(metadata, results)
        finally:
            self.phases.finish = time.perf_counter() - started
            self._report()


class _TimedStagingWriter(TimedWriter, AsyncStager):
    """A timed writer around one that stages async saves itself (DCP's FileSystemWriter and its
    subclasses). DCP tests ``isinstance(writer, AsyncStager)`` by static attributes, so forwarding
    by ``__getattr__`` is not enough: without this class DCP would stage with its own stager.
    Staging is the async caller's blocked time, not a phase of the write: it is not timed here.
    """

    inner: Any

    @property
    def should_synchronize_after_execute(self) -> bool:
        return bool(self.inner.should_synchronize_after_execute)

    def stage(self, state_dict: Any) -> Any:
        return self.inner.stage(state_dict)

    def synchronize_staging(self) -> None:
        self.inner.synchronize_staging()

    def close(self) -> None:
        self.inner.close()


class MetadataUnreadable(RuntimeError):
    """A checkpoint's .metadata could not be read (missing, truncated, garbled); names it."""


class TimedReader(_Timed[StorageReader], StorageReader):
    """A StorageReader that times the calls DCP makes on ``inner`` and forwards them unchanged,
    and measures what each load read from storage against what its plan needed.

    When the checkpoint's .metadata (at ``where``) cannot be read, :attr:`unreadable` names it,
    and DCP's fallback to a rank's own metadata, which no ckptbench save writes, gets the same
    error without another read."""

    _metadata: Metadata | None = None

    def __init__(self, inner: StorageReader, where: str = "") -> None:
        super().__init__(inner)
        self.where = where
        self.unreadable: MetadataUnreadable | None = None

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        self._clock.touch()
        if self.unreadable is not None:
            raise self.unreadable
        try:
            return self.inner.read_metadata(*args, **kwargs)
        except Exception as exc:
            self.unreadable = MetadataUnreadable(
                f"checkpoint metadata at {self.where}/.metadata is unreadable: "
                f"{type(exc).__name__}: {exc}"
            )
            raise self.unreadable from exc

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        self._metadata = metadata
        self._set_up(self.inner.set_up_storage_reader, metadata, is_coordinator, *args, **kwargs)

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        self._clock.touch()
        return self.inner.prepare_local_plan(plan)

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return self.inner.prepare_global_plan(plans)

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        # Outside the I/O time: what the plan needs, from the metadata DCP handed over.
        metadata = self._metadata
        needed = (
            traffic.needed_bytes(plan, metadata, torch_seam.reader_storage_data(self.inner))
            if metadata is not None
            else None
        )
        received = traffic.TRAFFIC.received
        started = self._clock.io_started()
        future = self.inner.read_data(plan, planner)

        def done(_: Any) -> None:
            self._clock.io_done(started)
            # Unknown needs, unknown reads: a memory map's reads pass no counted stream.
            self.phases.read_bytes = None if needed is None else traffic.TRAFFIC.received - received
            self.phases.needed_bytes = needed

        future.add_done_callback(done)
        return future


def timed_writer(inner: StorageWriter) -> TimedWriter:
    if isinstance(inner, AsyncStager):
        return _TimedStagingWriter(inner)
    return TimedWriter(inner)


def timed_reader(inner: StorageReader, where: str = "") -> TimedReader:
    """``inner`` timed; ``where``: the checkpoint it reads, named when its metadata is not."""
    torch_seam.quiet_metadata_fallback()
    return TimedReader(inner, where)
