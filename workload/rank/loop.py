"""The timed loop: DCP saves and loads of this rank's shard, timed, verified and cleaned up.

Procedures (``config.procedure``): ``ckptbench`` runs warm-ups, then ``sample_count`` samples of
save then load, each load into a fresh template; ``reference`` and ``mlperf`` run every save, then
every load into one reused template, with no warm-up. Templates are filled with NaN untimed.

Each operation is bracketed ``barrier(); t0; op; barrier(); t1`` as in the reference: ``t1 - t0``
is the collective duration, the same on every rank because DCP ends its save and load with
collectives. What tells ranks apart is timed inside the storage layer (planning, I/O, finish:
:mod:`ckptbench.workload.storage.timing`). Deleting a checkpoint (unless ``keep_checkpoints``) is
a third operation, timed the same way: its I/O is the rank's own delete of its data objects, its
finish rank 0's sweep of what is left (``.metadata``, folders). The closing barrier is an
all-reduce of a failure flag, so when any rank fails (a bad read, a verification mismatch, a
failed delete) every rank learns it at the same point and stops in step; nobody is left waiting
in a collective the others will never join.

Memory: the loaded (and verified) tensors are what the next sample saves, and the previous shard
is released before the load template is allocated, so one shard is held at a time, except while
an async save holds DCP's staging copy (a second full shard) until it is durable.
"""

from __future__ import annotations

import contextlib
import datetime
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.contract.choices import CacheMode, Procedure, SaveMode, Strategy
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results.rank import OpTiming, RankResult, TrainTiming
from ckptbench.workload.rank import full, saving, state, training
from ckptbench.workload.rank.failures import (
    CheckpointFailure,
    PeerFailure,
    VerificationError,
)
from ckptbench.workload.rank.process import memory, resources
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


def run(
    config: WorkloadConfig,
    *,
    after_save: AfterSave | None = None,
    log: Callable[[str], None] | None = None,
) -> RankResult:
    """Run the whole loop on this rank. Never raises for a benchmark failure: the result says."""
    say = log or _stderr
    loop = _Loop(config, after_save, say)
    return loop.run()


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class _Loop:
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
        self.collector = Collector(config.garbage_collection)
        self.meter = resources.Meter()
        self.saver: saving.Saver | None = None
        self.train: TrainTiming | None = None

    # -- the procedures ----------------------------------------------------------------------------

    def run(self) -> RankResult:
        config = self.config
        error: BaseException | None = None
        try:
            if config.saving.is_async:
                if self.distributed:
                    # The async save's collectives run on a background thread; its own group
                    # keeps them from ever interleaving with this thread's barriers.
                    self.save_group = dist.new_group(
                        backend="gloo", timeout=_timedelta(config.collective_timeout_seconds)
                    )
                self.saver = saving.Saver(config, self.save_group)
            # One storage client for the whole run, made and authenticated before any timing.
            self.session = self._step("open storage", lambda: backends.open_session(config))
            # The shard is handed over in a one-element list so that no frame of ours keeps the
            # saved shard alive while the next one is loaded: one shard in memory (two while an
            # async save holds its staging copy), not one more.
            holder = [self._step("build state", lambda: state.build_state(config))]
            if config.procedure is Procedure.CKPTBENCH:
                total = config.warmups + config.samples
                for index in range(total):
                    holder = [self._sample(index, index >= config.warmups, holder)]
            else:
                self._saves_then_loads(holder)
            if config.train_every is not None:
                if not holder:
                    holder = [self._step("build state", lambda: state.build_state(config))]
                self._train(holder.pop(), config.train_every)
        except Exception as exc:
            error = exc
            if not isinstance(exc, PeerFailure):
                self.say(f"[rank {config.rank}] error: {RankResult.error_text(exc)}")
            self._discard_failed_samples()
        finally:
            self.collector.close()
            if self.saver is not None:
                self.saver.close()
        result = self._result(error)
        if self.session is not None:
            self.session.close()
        return result

    def _sample(
        self, index: int, timed: bool, holder: list[dict[str, torch.Tensor]]
    ) -> dict[str, torch.Tensor]:
        """The ckptbench procedure's sample: save, then load into a fresh template."""
        config = self.config
        checkpoint_id = config.checkpoint_id(index)
        label = self._label(index, timed)

        shard = holder.pop()
        save = self._save(checkpoint_id, shard)
        del shard  # the next shard is whatever we load: one shard in memory, not two
        memory.after_drop()
        self._report("save", label, save)
        if timed:
            self.saves.ops.append(save)
        self._after_save(index, checkpoint_id)

        template: dict[str, torch.Tensor] = self._step(
            "prepare load", lambda: self._empty_template()
        )
        self.load_bytes = self._loaded_bytes(template)  # more than the shard on a reshard
        loaded = self._load(checkpoint_id, template)
        self._report("load", label, loaded)
        if timed:
            self.loads.ops.append(loaded)
        self._check(template)
        if not config.keep_checkpoints:
            self._cleanup(checkpoint_id, timed)
        if (
            config.load_world_size not in (None, config.world_size)
            or config.load_rank != config.rank
            or config.strategy is Strategy.FULL
        ):
            # A resharded load holds the load world's pieces, a load of another rank's shard
            # that rank's tensors, a full load the whole state on rank 0; the next save is
            # this rank's own.
            del template
            rebuilt: dict[str, torch.Tensor] = self._step(
                "build state", lambda: state.build_state(config)
            )
            return rebuilt
        return template

    def _saves_then_loads(self, holder: list[dict[str, torch.Tensor]]) -> None:
        """The reference's and MLPerf's order: every save, then every load into one template.

        No warm-up. The template is allocated once and reused, as in the reference; the untimed
        NaN fill spares even the first load the first touch of its pages (the reference's pays).
        """
        config = self.config
        ids = [config.checkpoint_id(i) for i in range(config.samples)]
        shard = holder.pop()
        for index, checkpoint_id in enumerate(ids):
            save = self._save(checkpoint_id, shard)
            self._report("save", self._label(index, True), save)
            self.saves.ops.append(save)
            self._after_save(index, checkpoint_id)
        del shard  # released before the template is allocated: one shard in memory
        memory.after_drop()
        template: dict[str, torch.Tensor] = self._step(
            "prepare load", lambda: self._empty_template()
        )
        self.load_bytes = self._loaded_bytes(template)  # more than the shard on a reshard
        for index, checkpoint_id in enumerate(ids):
            loaded = self._load(checkpoint_id, template)
            self._report("load", self._label(index, True), loaded)
            self.loads.ops.append(loaded)
            self._check(template)
        if not config.keep_checkpoints:
            for checkpoint_id in ids:
                self._cleanup(checkpoint_id)

    def _train(self, shard: dict[str, torch.Tensor], every: int) -> None:
        """The training step beside the saves (:mod:`.training`): baseline steps, then
        ``samples`` intervals of wait-for-previous, save, and ``every`` steps."""
        config = self.config
        matrix = self._step("size the training step", lambda: training.matrix_of(config))
        step = training.Step(matrix, config.seed)
        record = training.Record(matrix)
        for _ in range(training.WARM_STEPS):
            step()
        self._barrier()
        record.baseline = [step() for _ in range(training.baseline_steps(every))]
        first = config.warmups + config.samples  # after the samples' checkpoint ids
        previous: tuple[str, saving.InFlight] | None = None
        for interval in range(config.samples):
            checkpoint_id = config.checkpoint_id(first + interval)
            waited = 0.0
            if previous is not None:
                # As the tutorial's loop: result() before the next save.
                waited = self._durable(*previous)
                self._finish_training_save(previous[0])  # our cleanup, not the job's: untimed
            # Ranks drift apart over K steps of local compute, which a training job's per-step
            # all-reduce would not let them: they meet again, untimed, before each save.
            self._barrier()
            in_flight, stall = self._train_save(checkpoint_id, shard)
            steps = training.Interval(waited, stall)
            for _ in range(every):
                flying = in_flight is not None and not in_flight.upload.done()
                steps.steps.append(step())
                steps.in_flight.append(flying)
            record.intervals.append(steps)
            previous = (checkpoint_id, in_flight) if in_flight is not None else None
        if previous is not None:
            self._durable(*previous)
            self._finish_training_save(previous[0])
        self.train = record.timing(every)

    def _train_save(
        self, checkpoint_id: str, shard: dict[str, torch.Tensor]
    ) -> tuple[saving.InFlight | None, float]:
        """Start the interval's save: an async save's in-flight upload and its stall, or a sync
        save done (its stall is the whole save), checked on every rank."""
        session = self._session()
        self.pending.append(checkpoint_id)
        writer = self._step(
            "prepare save", lambda: timing.timed_writer(session.writer(checkpoint_id))
        )
        if self.saver is None:
            t0 = time.perf_counter()
            self._step(
                "training save",
                lambda: _checked(checkpoint_id, lambda: dcp_save(shard, storage_writer=writer)),
            )
            stall = time.perf_counter() - t0
            self._finish_training_save(checkpoint_id)
            return None, stall
        saver = self.saver
        in_flight: saving.InFlight = self._step("training save", lambda: saver.start(shard, writer))
        return in_flight, in_flight.stall

    def _durable(self, checkpoint_id: str, in_flight: saving.InFlight) -> float:
        """Wait for an interval's save, its upload's result checked, and return how long this
        rank waited; then agree with every rank, untimed (a faster rank would otherwise count
        the other's drift as its wait)."""
        timeout = self.config.collective_timeout_seconds
        error: BaseException | None = None
        t0 = time.perf_counter()
        try:
            _checked(checkpoint_id, lambda: in_flight.wait(timeout))
        except Exception as exc:
            error = exc
        waited = time.perf_counter() - t0
        self._agree(error, "training save")
        return waited

    def _finish_training_save(self, checkpoint_id: str) -> None:
        if not self.config.keep_checkpoints:
            self._cleanup(checkpoint_id)
        elif checkpoint_id in self.pending:
            self.pending.remove(checkpoint_id)

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

    def _label(self, index: int, timed: bool) -> str:
        if timed:
            return f"{index - self.config.warmups + 1}/{self.config.samples}"
        return f"warm-up {index + 1}/{self.config.warmups}"

    # -- operations --------------------------------------------------------------------------------

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
            if self.config.strategy is Strategy.FULL:
                return full.save(self.config, session, checkpoint_id, shard)
            if self.saver is not None:
                in_flight = self.saver.start(shard, writer)
                times = in_flight.wait(self.config.collective_timeout_seconds)
                if self.saver.mode is SaveMode.PROCESS:
                    # The upload ran in the checkpointer process, on a pickled copy of the
                    # writer: its storage calls are timed there, out of this rank's sight. Its
                    # I/O here is the background time, which bounds it from above.
                    return timing.Phases(planning=0.0, io=times.background)
            else:
                dcp_save(shard, storage_writer=writer)
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
            return timing.timed_reader(session.reader(checkpoint_id))

        reader: timing.TimedReader = self._step("prepare load", prepare)

        def load() -> timing.Phases:
            if self.config.strategy is Strategy.FULL:
                return full.load(self.config, session, checkpoint_id, template)
            dcp_load(template, storage_reader=reader)
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
        self._agree(error, what)
        return Op(
            time.perf_counter() - t0, phases, started_at, ended_at, gc_seconds=collected.seconds
        )

    def _session(self) -> backends.StorageSession:
        if self.session is None:
            raise RuntimeError("the storage session is opened before the first sample")
        return self.session

    def _load_view(self) -> WorkloadConfig | None:
        """The config whose tensors this rank loads (None: it loads nothing)."""
        config = self.config
        if config.strategy is Strategy.FULL:
            return config.whole() if config.rank == 0 else None
        return config.loader()

    def _empty_template(self) -> dict[str, torch.Tensor]:
        view = self._load_view()
        if view is None or self.config.strategy is Strategy.FULL:
            return {}  # the full strategy's rank 0 loads into a fresh dict: one copy held
        return state.empty_template(view)

    def _loaded_bytes(self, template: dict[str, torch.Tensor]) -> int:
        """Tensor bytes this rank's load brings in: its template's, or the whole state for the
        full strategy's rank 0."""
        view = self._load_view()
        if self.config.strategy is Strategy.FULL:
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

    def _discard_failed_samples(self) -> None:
        # Bounded in time and with no collective (a peer may be gone); never raises.
        if self.pending and self.session is not None and not self.config.keep_checkpoints:
            self.left_behind = self.session.discard_failed(self.pending, self.config.rank)
            if self.left_behind:
                self.say(f"[rank {self.config.rank}] could not remove {self.left_behind}")

    # -- coordination ------------------------------------------------------------------------------

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
            world = self.config.world_size
            failed = 1 if error is not None else 0
            flags = torch.tensor([failed, failed * (world - self.config.rank)], dtype=torch.int64)
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            if error is None and int(flags[0]):
                first = world - int(flags[1])
                raise PeerFailure(f"rank {first} failed during {what}; stopping with it")
        if error is not None:
            raise error

    # -- reporting -------------------------------------------------------------------------------

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

    def _result(self, error: BaseException | None) -> RankResult:
        verified = self.verified
        session = self.session
        paths = session.read_paths if session else None
        if error is not None and verified is True:
            verified = None  # not every load was checked
        return RankResult(
            rank=self.config.rank,
            host=socket.gethostname(),
            bytes=self.config.shard_bytes,
            load_bytes=self.load_bytes,
            save=self.saves.timing(),
            load=self.loads.timing(),
            delete=self.deletes.timing(),
            train=self.train,
            peak_rss_bytes=memory.peak_rss_bytes(),
            checkpointer_peak_rss_bytes=self.saver.checkpointer_peak_rss if self.saver else None,
            verified=verified if self.config.verify else None,
            resources=self.meter.read(),
            setup_seconds=round(session.setup_seconds, 6) if session else None,
            left_behind=self.left_behind,
            read_paths={k: v for k, v in paths.items() if v} if paths else None,
            error=RankResult.error_text(error) if error is not None else None,
            procedure=self.config.procedure,
            cache=self.config.cache_mode,
        )


def _checked(checkpoint_id: str, call: Callable[[], Any]) -> Any:
    """``call()``, with DCP's CheckpointException (a BaseException, which ``except
    Exception`` misses) turned into a CheckpointFailure naming each failing rank."""
    try:
        return call()
    except CheckpointException as exc:
        raise CheckpointFailure.of("save", exc, checkpoint_id) from None


def _timedelta(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)
