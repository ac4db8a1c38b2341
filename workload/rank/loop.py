"""The timed loop's procedures: the order of this rank's DCP saves, loads and deletes.

The operations themselves (timed, verified, cleaned up, agreed on) are :mod:`.operations`.

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

import itertools
import socket
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.contract.choices import Procedure
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results.rank import Leftovers, RankResult
from ckptbench.workload.rank import saving, state, training
from ckptbench.workload.rank.both import loader, windows
from ckptbench.workload.rank.failures import (
    PeerFailure,
)
from ckptbench.workload.rank.operations import AfterSave, Operations, as_timedelta, checked
from ckptbench.workload.rank.process import memory
from ckptbench.workload.storage import session as backends
from ckptbench.workload.storage import timing


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


class _Loop(Operations):
    """The procedures: the order of a rank's saves, loads, deletes and training steps."""

    def run(self) -> RankResult:
        config = self.config
        error: BaseException | None = None
        try:
            if config.saving.is_async:
                if self.distributed:
                    # The async save's collectives run on a background thread; its own group
                    # keeps them from ever interleaving with this thread's barriers.
                    # On a restore onto more ranks, the saving ranks' only (every rank makes
                    # it: creating a group is collective).
                    savers = None
                    if config.rank_count != config.world_size:
                        savers = list(range(config.world_size))
                    self.save_group = dist.new_group(
                        ranks=savers,
                        backend="gloo",
                        timeout=as_timedelta(config.collective_timeout_seconds),
                    )
                if config.saves:
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
            or config.single_object
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
        if config.data_loading is not None:
            self._train_with_loader(shard, every)
            return
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

    def _train_with_loader(self, shard: dict[str, torch.Tensor], every: int) -> None:
        """Both demands at once (:mod:`.windows`): ``samples`` cycles of a save with the loader
        off, a save with it reading, and it reading alone, ``every`` steps each, each step's batch
        from the data loader (:mod:`.both`)."""
        config = self.config
        ids = (config.checkpoint_id(i) for i in itertools.count(config.warmups + config.samples))
        loop = self

        class _Started:
            def __init__(self) -> None:
                self.checkpoint_id = next(ids)
                self.in_flight, self.stall = loop._train_save(self.checkpoint_id, shard)

            def durable(self) -> float:
                if self.in_flight is None:  # a sync save: done, checked and removed already
                    return self.stall
                loop._durable(self.checkpoint_id, self.in_flight)
                times = self.in_flight.wait(config.collective_timeout_seconds)
                loop._finish_training_save(self.checkpoint_id)  # our cleanup: untimed
                return times.stall + times.background

        side = self._step(
            "prepare the loader",
            lambda: loader.LoaderSide(config, self._barrier, _Started, self.distributed),
        )
        measured = windows.run(config.samples, every, side)
        self.both = windows.timing(measured, every, config.samples, side.compute_seconds)

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
                lambda: checked(checkpoint_id, lambda: dcp_save(shard, storage_writer=writer)),
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
            checked(checkpoint_id, lambda: in_flight.wait(timeout))
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

    def _label(self, index: int, timed: bool) -> str:
        if timed:
            return f"{index - self.config.warmups + 1}/{self.config.samples}"
        return f"warm-up {index + 1}/{self.config.warmups}"

    def _discard_failed_samples(self) -> None:
        # Bounded in time and with no collective (a peer may be gone); never raises.
        if self.pending and self.session is not None and not self.config.keep_checkpoints:
            left = self.session.discard_failed(self.pending, self.config.rank)
            if left is not None:
                self.left_behind = left.text
                self.left = Leftovers(objects=left.own, under=self.config.run_path)
                self.say(f"[rank {self.config.rank}] could not remove {left.text}")

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
            # A rank that saved nothing (a restore onto more ranks adds ranks that only load)
            # kept in step through the save and delete brackets but records neither.
            save=self.saves.timing() if self.config.saves else None,
            load=self.loads.timing(),
            delete=self.deletes.timing() if self.config.saves else None,
            train=self.train,
            both=self.both,
            checkpointer_peak_rss_bytes=self.saver.checkpointer_peak_rss if self.saver else None,
            verified=verified if self.config.verify else None,
            resources=self.meter.read(),
            setup_seconds=round(session.setup_seconds, 6) if session else None,
            left_behind=self.left_behind,
            left=self.left,
            read_paths={k: v for k, v in paths.items() if v} if paths else None,
            error=RankResult.error_text(error) if error is not None else None,
            procedure=self.config.procedure,
            cache=self.config.cache_mode,
        )
