"""One rank's timed operations: a save, a load and a delete of a checkpoint, each bracketed
``barrier(); t0; op; barrier(); t1`` and agreed on by every rank, and the samples they record.

:class:`Operations` holds what the operations share (the storage session, the samples, the
checkpoints not yet cleaned up); the procedures in :mod:`.loop` put them in order. The closing
barrier is an all-reduce of a failure flag (:meth:`Operations._agree`), so when any rank fails
every rank learns it at the same point and stops in step.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.contract.choices import CacheMode
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results.rank import (
    BothTiming,
    Leftovers,
    OpTiming,
    TrainTiming,
)
from ckptbench.workload.rank import full, saving, state
from ckptbench.workload.rank.failures import (
    CheckpointFailure,
    PeerFailure,
    VerificationError,
)
from ckptbench.workload.rank.process import resources
from ckptbench.workload.rank.process.collector import Collector
from ckptbench.workload.storage import session as backends
from ckptbench.workload.storage import timing
from ckptbench.workload.storage.file import cache

AfterSave = Callable[[int, str], None]
"""A hook run on every rank after a sample's save, before its load: ``(sample, checkpoint id)``."""


@dataclass
class Op:
    """One timed operation on this rank."""

    seconds: float  # barrier to barrier: the collective as this rank saw it
    phases: timing.Phases  # planning, I/O and finish, timed inside the storage layer
    started_at: float  # wall clock (Unix seconds), for spans across ranks
    ended_at: float
    # An async save (saving.SaveTimes): the stall is the caller's blocked time.
    blocked_seconds: float | None = None
    staging_seconds: float | None = None
    background_seconds: float | None = None
    gc_seconds: float = 0.0  # automatic garbage collections inside the operation


@dataclass
class Series:
    """One operation's timed samples on this rank."""

    ops: list[Op] = field(default_factory=list)

    def timing(self) -> OpTiming | None:
        if not self.ops:
            return None
        blocked = [op.blocked_seconds for op in self.ops if op.blocked_seconds is not None]
        read = [op.phases.read_bytes for op in self.ops if op.phases.read_bytes is not None]
        needed = [op.phases.needed_bytes for op in self.ops if op.phases.needed_bytes is not None]
        staging = [op.staging_seconds for op in self.ops if op.staging_seconds is not None]
        background = [op.background_seconds for op in self.ops if op.background_seconds is not None]
        return OpTiming.of(
            [op.seconds for op in self.ops],
            [op.phases.own_io or 0.0 for op in self.ops],
            [op.phases.planning or 0.0 for op in self.ops],
            finish_seconds=[op.phases.finish for op in self.ops],
            blocked_seconds=blocked or None,
            staging_seconds=staging or None,
            background_seconds=background or None,
            gc_seconds=[op.gc_seconds for op in self.ops],
            started_at=[op.started_at for op in self.ops],
            ended_at=[op.ended_at for op in self.ops],
            read_bytes=sum(read) if read else None,
            needed_bytes=sum(needed) if needed else None,
        )


class Operations:
    """A rank's timed save, load and delete, and the coordination every rank agrees through."""

    def __init__(self, config: WorkloadConfig, after_save: AfterSave | None, say: Any) -> None:
        self.config = config
        self.after_save = after_save
        self.say: Callable[[str], None] = say
        self.distributed = dist.is_available() and dist.is_initialized()
        self.saves = Series()
        self.loads = Series()
        self.deletes = Series()
        self.verified: bool | None = None
        self.load_bytes: int | None = None  # what this rank's load template holds
        self.save_group: Any = None
        self.session: backends.StorageSession | None = None
        # Checkpoints saved (or being saved) and not yet cleaned up: what a failure leaves.
        self.pending: list[str] = []
        self.left_behind: str | None = None
        self.left: Leftovers | None = None
        self.collector = Collector(config.garbage_collection)
        self.meter = resources.Meter()
        self.saver: saving.Saver | None = None
        self.train: TrainTiming | None = None
        self.both: BothTiming | None = None

    def _after_save(self, index: int, checkpoint_id: str) -> None:
        if self.after_save is not None:
            hook = self.after_save
            self._step("after-save hook", lambda: hook(index, checkpoint_id))
        if self.config.cache_mode is CacheMode.DROPPED:
            # After the save's fsync and before the load: the load then reads the disk.
            self._step("evict page cache", lambda: cache.evict(checkpoint_id))

    def _check(self, loaded: dict[str, torch.Tensor]) -> None:
        if self.config.verify:
            self._step("verify", lambda: self._verify(loaded))
            self.verified = True

    def _save(self, checkpoint_id: str, shard: dict[str, torch.Tensor]) -> Op:
        session = self._session()
        if checkpoint_id not in self.pending:
            self.pending.append(checkpoint_id)
        writer: timing.TimedWriter = self._step(
            "prepare save", lambda: timing.timed_writer(session.writer(checkpoint_id))
        )
        times: saving.SaveTimes | None = None

        def save() -> timing.Phases:
            nonlocal times
            if not self.config.saves:
                # A rank a restore onto more ranks added: outside the saving group, it only
                # waits at the brackets; its save is not recorded (loop._result).
                return timing.Phases(planning=0.0, io=0.0)
            if self.config.single_object:
                return full.save(self.config, session, checkpoint_id, shard)
            if self.saver is not None:
                in_flight = self.saver.start(shard, writer)
                times = in_flight.wait(self.config.collective_timeout_seconds)
                if times.checkpointer is not None:
                    # The upload ran in the checkpointer process, on a pickled copy of the
                    # writer, which timed its storage calls there and reported them.
                    return times.checkpointer
            else:
                dcp_save(shard, storage_writer=writer, process_group=state.save_group(self.config))
            return writer.phases

        try:
            op = self._timed("save", save, checkpoint_id)
        except Exception:
            self._discard(checkpoint_id)
            raise
        if times is not None:
            op.blocked_seconds = times.stall
            op.staging_seconds = times.staging
            op.background_seconds = times.background
        return op

    def _discard(self, checkpoint_id: str) -> None:
        """After a failed save, remove this rank's partial shards (a full disk stays full else)."""
        with contextlib.suppress(Exception):  # bounded, best effort: the final cleanup reports
            self._session().discard(checkpoint_id, f"__{self.config.rank}_")

    def _load(self, checkpoint_id: str, template: dict[str, torch.Tensor]) -> Op:
        session = self._session()

        def prepare() -> timing.TimedReader:
            # NaN everywhere, untimed: a load that skips an element fails verification even on
            # memory that still holds the values just saved, and the timed load finds every page
            # of its destination already touched.
            state.mark_unwritten(template)
            return timing.timed_reader(session.reader(checkpoint_id), checkpoint_id)

        reader: timing.TimedReader = self._step("prepare load", prepare)

        def load() -> timing.Phases:
            if self.config.single_object:
                return full.load(self.config, session, checkpoint_id, template)
            try:
                dcp_load(template, storage_reader=reader)
            except BaseException:  # DCP's CheckpointException is one
                if reader.unreadable is not None:  # said by name, not as DCP's "metadata is None"
                    raise reader.unreadable from None
                raise
            return reader.phases

        return self._timed("load", load, checkpoint_id)

    def _timed(self, what: str, operation: Callable[[], timing.Phases], where: str) -> Op:
        """``barrier; t0; operation; barrier; t1``: the collective, with the storage phases.

        The closing barrier is :meth:`_agree`, so a failure on any rank stops every rank here.
        """
        self.collector.tidy()
        self._barrier()
        started_at = time.time()
        t0 = time.perf_counter()
        error: BaseException | None = None
        phases = timing.Phases()
        with self.collector.timed() as collected:
            try:
                phases = operation()
            except CheckpointException as exc:  # a BaseException: `except Exception` misses it
                error = CheckpointFailure.of(what, exc, where)
            except Exception as exc:
                error = exc
        ended_at = time.time()
        try:
            self._agree(error, what)
            seconds = time.perf_counter() - t0
        finally:  # after the bracket; a failed operation's retries explain it too
            self._report_retries(what, where)
        return Op(seconds, phases, started_at, ended_at, gc_seconds=collected.seconds)

    def _report_retries(self, what: str, where: str) -> None:
        if self.session is not None:
            with contextlib.suppress(Exception):  # a report must not fail the operation
                self.session.report_retries(f"[rank {self.config.rank}] {what} of {where}")

    def _session(self) -> backends.StorageSession:
        if self.session is None:
            raise RuntimeError("the storage session is opened before the first sample")
        return self.session

    def _load_view(self) -> WorkloadConfig | None:
        """The config whose tensors this rank loads (None: it loads nothing)."""
        config = self.config
        if config.single_object:
            return config.whole() if config.rank == 0 else None
        return config.loader()

    def _empty_template(self) -> dict[str, torch.Tensor]:
        view = self._load_view()
        if view is None or self.config.single_object:
            return {}  # the full strategy's rank 0 loads into a fresh dict: one copy held
        return state.empty_template(view)

    def _loaded_bytes(self, template: dict[str, torch.Tensor]) -> int:
        """Tensor bytes this rank's load brings in: its template's, or the whole state for the
        full strategy's rank 0."""
        view = self._load_view()
        if self.config.single_object:
            return 0 if view is None else view.total_bytes
        return state.tensor_bytes(template)

    def _verify(self, loaded: dict[str, torch.Tensor]) -> None:
        view = self._load_view()
        if view is None:
            return  # nothing loaded here; rank 0's verdict reaches every rank through _step
        try:
            state.verify(loaded, view)
        except VerificationError:
            self.verified = False
            raise

    def _cleanup(self, checkpoint_id: str, timed: bool = True) -> None:
        """Delete the checkpoint, timed as its own operation (the cost of keeping only the
        latest K), bracketed like a save or a load; kept in the delete series when ``timed``."""
        deleted = self._timed("delete", lambda: self._delete(checkpoint_id), checkpoint_id)
        if timed:
            self.deletes.ops.append(deleted)
        if checkpoint_id in self.pending:
            self.pending.remove(checkpoint_id)

    def _delete(self, checkpoint_id: str) -> timing.Phases:
        # Each rank deletes its own data objects; only then rank 0 sweeps what is left (the
        # .metadata, and any folder), so no two ranks ever delete the same object. The agreement
        # between the two is inside the timed operation, so that a failed delete on any rank
        # stops every rank at the same point: here, or at the operation's closing agreement.
        session = self._session()
        phases = timing.Phases(planning=0.0)
        t0 = time.perf_counter()
        error: BaseException | None = None
        try:
            session.delete_prefix(checkpoint_id, f"__{self.config.rank}_")
        except Exception as exc:
            error = exc
        phases.io = time.perf_counter() - t0
        self._agree(error, "delete")
        if self.config.rank == 0:
            t1 = time.perf_counter()
            try:
                session.delete_prefix(checkpoint_id)
            finally:
                phases.finish = time.perf_counter() - t1
        return phases

    def _step(self, what: str, call: Callable[[], Any]) -> Any:
        """Run a local step, then agree with every rank on whether everyone succeeded."""
        try:
            value = call()
        except Exception as exc:
            self._agree(exc, what)
            raise  # _agree re-raises; this keeps type checkers convinced
        self._agree(None, what)
        return value

    def _barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def _agree(self, error: BaseException | None, what: str) -> None:
        """A barrier that also tells every rank whether any rank failed, and the lowest one."""
        if self.distributed:
            world = self.config.rank_count
            failed = 1 if error is not None else 0
            flags = torch.tensor([failed, failed * (world - self.config.rank)], dtype=torch.int64)
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            if error is None and int(flags[0]):
                first = world - int(flags[1])
                raise PeerFailure(f"rank {first} failed during {what}; stopping with it")
        if error is not None:
            raise error

    def _report(self, op: str, label: str, timed: Op) -> None:
        if self.config.rank != 0:
            return
        line = f"[rank 0] {op} {label}: {timed.seconds:.3f} s"
        if timed.phases.own_io is not None:
            line += f" (I/O {timed.phases.own_io:.3f} s"
            if timed.blocked_seconds is not None:
                line += f", blocked {timed.blocked_seconds:.3f} s"
            line += ")"
        self.say(line)


def checked(checkpoint_id: str, call: Callable[[], Any]) -> Any:
    """``call()``, with DCP's CheckpointException (a BaseException, which ``except
    Exception`` misses) turned into a CheckpointFailure naming each failing rank."""
    try:
        return call()
    except CheckpointException as exc:
        raise CheckpointFailure.of("save", exc, checkpoint_id) from None


def as_timedelta(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)
