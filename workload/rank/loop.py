"""The timed loop: warm-ups, then ``sample_count`` samples of DCP save then load, each verified.

Each operation is bracketed ``barrier(); t0; op; own = t; barrier(); t1`` as in the reference:
``t1 - t0`` is the collective duration this rank saw, ``own - t0`` its own part. The closing
barrier is an all-reduce of a failure flag, so when any rank fails (a bad read, a verification
mismatch, a failed delete) every rank learns it at the same point and stops in step; nobody is
left waiting in a collective the others will never join.

Memory stays at one shard: the loaded (and verified) tensors are what the next sample saves, and
the previous shard is released before the load template is allocated.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results import OpTiming, RankResult
from ckptbench.workload.rank import state
from ckptbench.workload.storage import factory as backends

AfterSave = Callable[[int, str], None]
"""A hook run on every rank after a sample's save, before its load: ``(sample, checkpoint id)``."""


class PeerFailure(RuntimeError):
    """Another rank failed; this one stops with it. The failing rank reports the cause."""


class CheckpointFailure(RuntimeError):
    """DCP reported failures; the message names each failing rank and its error, briefly."""

    @classmethod
    def of(cls, op: str, exc: CheckpointException) -> CheckpointFailure:
        parts = []
        for rank, (cause, _trace) in sorted(exc.failures.items()):
            parts.append(f"rank {rank}: {type(cause).__name__}: {cause}")
        return cls(f"{op} failed on " + "; ".join(parts))


class AsyncSaveError(RuntimeError):
    """An async save's future did not deliver the checkpoint's metadata."""


@dataclass
class _Timings:
    save: list[float] = field(default_factory=list)
    save_own: list[float] = field(default_factory=list)
    save_blocked: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    load_own: list[float] = field(default_factory=list)


@dataclass
class _Op:
    seconds: float
    own_seconds: float
    blocked_seconds: float | None = None


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
        self.timings = _Timings()
        self.verified: bool | None = None
        self.save_group: Any = None
        self.session: backends.StorageSession | None = None

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> RankResult:
        config = self.config
        error: BaseException | None = None
        try:
            if config.async_save and self.distributed:
                # The async save's collectives run on a background thread; its own group keeps
                # them from ever interleaving with this thread's barriers.
                self.save_group = dist.new_group(
                    backend="gloo", timeout=_timedelta(config.collective_timeout_seconds)
                )
            # One storage client for the whole run, made and authenticated before any timing.
            self.session = self._step("open storage", lambda: backends.open_session(config))
            # The shard is handed over in a one-element list so that no frame of ours keeps the
            # saved shard alive while the next one is loaded: one shard in memory, not two.
            holder = [self._step("build state", lambda: state.build_state(config))]
            total = config.warmup_samples + config.sample_count
            for index in range(total):
                timed = index >= config.warmup_samples
                holder = [self._sample(index, timed, holder)]
        except Exception as exc:
            error = exc
            if not isinstance(exc, PeerFailure):
                self.say(f"[rank {config.rank}] error: {RankResult.error_text(exc)}")
        result = self._result(error)
        if self.session is not None:
            self.session.close()
        return result

    def _sample(
        self, index: int, timed: bool, holder: list[dict[str, torch.Tensor]]
    ) -> dict[str, torch.Tensor]:
        config = self.config
        checkpoint_id = config.checkpoint_id(index)
        label = self._label(index, timed)

        shard = holder.pop()
        save = self._save(checkpoint_id, shard)
        del shard  # the next shard is whatever we load: one shard in memory, not two
        self._report("save", label, save)
        if timed:
            self.timings.save.append(save.seconds)
            self.timings.save_own.append(save.own_seconds)
            if save.blocked_seconds is not None:
                self.timings.save_blocked.append(save.blocked_seconds)
        if self.after_save is not None:
            hook = self.after_save
            self._step("after-save hook", lambda: hook(index, checkpoint_id))

        loaded, load = self._load(checkpoint_id)
        self._report("load", label, load)
        if timed:
            self.timings.load.append(load.seconds)
            self.timings.load_own.append(load.own_seconds)
        if config.verify:
            self._step("verify", lambda: self._verify(loaded))
            self.verified = True
        if not config.keep_checkpoints:
            self._cleanup(checkpoint_id)
        return loaded

    def _label(self, index: int, timed: bool) -> str:
        if timed:
            return f"{index - self.config.warmup_samples + 1}/{self.config.sample_count}"
        return f"warm-up {index + 1}/{self.config.warmup_samples}"

    # -- operations --------------------------------------------------------------------------------

    def _save(self, checkpoint_id: str, shard: dict[str, torch.Tensor]) -> _Op:
        session = self._session()
        writer = self._step("prepare save", lambda: session.writer(checkpoint_id))
        blocked: float | None = None

        def save() -> None:
            nonlocal blocked
            if self.config.async_save:
                t0 = time.perf_counter()
                future = dcp_async_save(shard, storage_writer=writer, process_group=self.save_group)
                blocked = time.perf_counter() - t0
                self._await_durable(future)
            else:
                dcp_save(shard, storage_writer=writer)

        seconds, own = self._timed("save", save)
        return _Op(seconds, own, blocked)

    def _timed(self, what: str, operation: Callable[[], None]) -> tuple[float, float]:
        """``barrier; t0; operation; own; barrier; t1``: (collective, own) seconds.

        The closing barrier is :meth:`_agree`, so a failure on any rank stops every rank here.
        """
        self._barrier()
        t0 = time.perf_counter()
        error: BaseException | None = None
        try:
            operation()
        except CheckpointException as exc:  # a BaseException: `except Exception` misses it
            error = CheckpointFailure.of(what, exc)
        except Exception as exc:
            error = exc
        own = time.perf_counter() - t0
        self._agree(error, what)
        return time.perf_counter() - t0, own

    def _await_durable(self, future: Any) -> None:
        # The reference never looks at the future: a failed upload would pass as a fast save.
        upload: Future[Any] = getattr(future, "upload_completion", future)
        try:
            metadata = upload.result(timeout=self.config.collective_timeout_seconds)
        except TimeoutError as exc:
            raise AsyncSaveError(
                "async save: checkpoint not durable within "
                f"{self.config.collective_timeout_seconds:.0f} s"
            ) from exc
        from torch.distributed.checkpoint.metadata import Metadata

        if not isinstance(metadata, Metadata):
            raise AsyncSaveError(
                f"async save: future returned {type(metadata).__name__}, not Metadata"
            )

    def _load(self, checkpoint_id: str) -> tuple[dict[str, torch.Tensor], _Op]:
        session = self._session()

        def prepare() -> tuple[dict[str, torch.Tensor], Any]:
            template = state.empty_template(self.config)
            state.mark_unwritten(template)
            return template, session.reader(checkpoint_id)

        template, reader = self._step("prepare load", prepare)
        seconds, own = self._timed("load", lambda: dcp_load(template, storage_reader=reader))
        return template, _Op(seconds, own)

    def _session(self) -> backends.StorageSession:
        if self.session is None:
            raise RuntimeError("the storage session is opened before the first sample")
        return self.session

    def _verify(self, loaded: dict[str, torch.Tensor]) -> None:
        try:
            state.verify(loaded, self.config)
        except state.VerificationError:
            self.verified = False
            raise

    def _cleanup(self, checkpoint_id: str) -> None:
        # Each rank deletes its own data objects; only then rank 0 sweeps what is left (the
        # .metadata, and any folder), so no two ranks ever delete the same object.
        session = self._session()
        rank_prefix = f"__{self.config.rank}_"
        self._step("cleanup", lambda: session.delete_prefix(checkpoint_id, rank_prefix))
        if self.config.rank == 0:
            self._step("cleanup", lambda: session.delete_prefix(checkpoint_id))
        else:
            self._agree(None, "cleanup")

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

    def _report(self, op: str, label: str, timing: _Op) -> None:
        if self.config.rank != 0:
            return
        line = f"[rank 0] {op} {label}: {timing.seconds:.3f} s"
        if timing.blocked_seconds is not None:
            line += f" (blocked {timing.blocked_seconds:.3f} s)"
        self.say(line)

    def _result(self, error: BaseException | None) -> RankResult:
        t = self.timings
        save = OpTiming.of(t.save, t.save_own, t.save_blocked or None) if t.save else None
        load = OpTiming.of(t.load, t.load_own) if t.load else None
        verified = self.verified
        session = self.session
        paths = session.read_paths if session else None
        if error is not None and verified is True:
            verified = None  # not every load was checked
        return RankResult(
            rank=self.config.rank,
            host=socket.gethostname(),
            bytes=self.config.shard_bytes,
            save=save,
            load=load,
            verified=verified if self.config.verify else None,
            setup_seconds=round(session.setup_seconds, 6) if session else None,
            read_paths={k: v for k, v in paths.items() if v} if paths else None,
            error=RankResult.error_text(error) if error is not None else None,
        )


def _timedelta(seconds: float) -> Any:
    import datetime

    return datetime.timedelta(seconds=seconds)
