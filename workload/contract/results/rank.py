"""What one rank reports, shared by the workload and the operator: its results, bounded.

A rank reports a :class:`RankResult`. Its compact JSON form is the container's termination
message (Kubernetes keeps at most 4 KiB of it): summary statistics always, per-sample lists while
they fit. :func:`~ckptbench.workload.contract.results.figures.summarize` computes every figure of
the run once (:class:`~ckptbench.workload.contract.results.summaries.RunSummary`), for the local
runner's outputs and the operator's status alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ckptbench.workload.contract.choices import CacheMode, Procedure
from ckptbench.workload.contract.results import run_samples, stats
from ckptbench.workload.contract.results.run_samples import Vectors

SCHEMA_VERSION = 2
TERMINATION_MESSAGE_LIMIT = 4096
_ERROR_LIMIT = 1000
ROUND = 6  # microseconds: far below any measured operation, and keeps the JSON short

# A rank's report is untrusted input to the operator (a benchmark's image writes it): every number
# in it is finite and bounded before a figure is computed from it, so a forged one makes that rank
# unreadable instead of an overflow, or a NaN the API server refuses, in the status.
MAX_SECONDS = 1e8  # three years: longer than any deadline a benchmark can have
MAX_TIMESTAMP = 1e11  # Unix seconds, year 5138
MAX_BYTES = 2**60
MAX_COUNT = 10**9
MAX_SAMPLES_LISTED = 2000  # samples plus warm-ups, with room
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
Timestamp = Annotated[float, Field(ge=0, le=MAX_TIMESTAMP, allow_inf_nan=False)]
Bytes = Annotated[int, Field(ge=0, le=MAX_BYTES)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
SecondsList = Annotated[list[Seconds], Field(max_length=MAX_SAMPLES_LISTED)]


class OpStats(BaseModel):
    """Statistics of one operation's samples, in seconds."""

    model_config = ConfigDict(frozen=True)

    n: Count
    mean: Seconds
    stdev: Seconds
    p50: Seconds
    p90: Seconds
    max: Seconds
    min: Seconds
    # Only over at least stats.P99_MIN_SAMPLES samples; absent (and not in the message) below.
    p99: Seconds | None = None

    @classmethod
    def of(cls, samples: Sequence[float]) -> OpStats:
        return cls(
            n=len(samples),
            mean=round(stats.mean(samples), ROUND),
            stdev=round(stats.stdev(samples), ROUND),
            p50=round(stats.percentile(samples, 50), ROUND),
            p90=round(stats.percentile(samples, 90), ROUND),
            max=round(max(samples), ROUND),
            min=round(min(samples), ROUND),
            p99=_rounded_or_none(stats.tail_percentile(samples)),
        )


Packed = Annotated[str, Field(max_length=run_samples.MAX_PACKED)]
Rate = Annotated[float, Field(ge=0, le=MAX_BYTES, allow_inf_nan=False)]


class RunFigures(BaseModel):
    """One operation's per-sample figures over every rank, of the run's vectors by the functions
    every summary uses; rank 0's message carries these, a fixed size, where the vectors do not."""

    model_config = ConfigDict(frozen=True)

    seconds: OpStats
    spans: OpStats | None = None
    # MLPerf's per-sample GiB/s of the spans (else the seconds): mlperf_figures.sample_rates.
    rates: tuple[Rate, Rate] | None = None

    @classmethod
    def of(cls, vectors: Vectors, rates: tuple[float, float] | None) -> RunFigures:
        return cls(
            seconds=OpStats.of(vectors.seconds),
            spans=OpStats.of(vectors.spans) if vectors.spans else None,
            rates=rates,
        )


class RunSamples(BaseModel):
    """Rank 0's reduction of every rank's per-sample lists, per operation: the run's vectors,
    packed, while they fit in its message, and always their figures (:class:`RunFigures`)."""

    model_config = ConfigDict(frozen=True)

    ranks: int = Field(ge=0, le=10**9, description="Ranks whose full results were reduced.")
    save: Packed | None = None
    load: Packed | None = None
    delete: Packed | None = None
    save_figures: RunFigures | None = None
    load_figures: RunFigures | None = None
    delete_figures: RunFigures | None = None

    @model_validator(mode="after")
    def _unpackable(self) -> RunSamples:
        # A forged message is refused when read (the rank's result unreadable), not mid-figure.
        for op in ("save", "load", "delete"):
            self.vectors(op)
        return self

    def vectors(self, op: str) -> Vectors | None:
        packed: str | None = getattr(self, op)
        return run_samples.unpack(packed) if packed is not None else None

    def figures(self, op: str) -> RunFigures | None:
        found: RunFigures | None = getattr(self, f"{op}_figures")
        return found

    def without_figures(self) -> RunSamples:
        """The figures of the operations whose vectors are here: computed from them again."""
        kept = (op for op in ("save", "load", "delete") if getattr(self, op) is not None)
        return self.model_copy(update={f"{op}_figures": None for op in kept})

    def without_vectors(self) -> RunSamples:
        """The figures alone: what rank 0's message keeps when the vectors do not fit."""
        return self.model_copy(update={"save": None, "load": None, "delete": None})


class OpTiming(BaseModel):
    """One operation (save or load) on one rank, over its timed samples.

    ``seconds`` is barrier to barrier: the collective duration as this rank saw it, the same on
    every rank because DCP ends each operation with collectives. What tells ranks apart is timed
    inside the storage layer (:mod:`ckptbench.workload.storage.timing`): ``io`` is this rank's own
    I/O (``write_data``/``read_data`` until their futures complete, plus ``finish``, the
    ``.metadata`` write, on the coordinator), ``planning`` runs from DCP's first storage call to
    the start of data I/O (it includes exchanging plans). For an async save, ``seconds`` runs until
    the checkpoint is durable, ``blocked`` is the stall (the call until it returns, which includes
    the staging copy when the stager copies inside the call), ``staging`` the copy when it runs
    apart from the call, and ``background`` the return until the upload is durable.
    ``started_at``/``ended_at`` are each sample's wall-clock start and end on this rank (Unix
    seconds), for the mlperf procedure's durations. ``gc`` is
    the time automatic garbage collections took inside the operation on this rank (absent when
    none ran: the ``manual`` garbage collection setting keeps them out).
    """

    model_config = ConfigDict(frozen=True)

    stats: OpStats
    io: OpStats
    planning: OpStats
    finish: OpStats | None = None
    blocked: OpStats | None = None
    staging: OpStats | None = None
    background: OpStats | None = None
    gc: OpStats | None = None
    seconds: SecondsList | None = None
    io_seconds: SecondsList | None = None
    planning_seconds: SecondsList | None = None
    finish_seconds: SecondsList | None = None
    blocked_seconds: SecondsList | None = None
    staging_seconds: SecondsList | None = None
    background_seconds: SecondsList | None = None
    gc_seconds: SecondsList | None = None
    started_at: Annotated[list[Timestamp], Field(max_length=MAX_SAMPLES_LISTED)] | None = None
    ended_at: Annotated[list[Timestamp], Field(max_length=MAX_SAMPLES_LISTED)] | None = None
    # A load's traffic over its timed samples, counted in the storage layer: bytes read from
    # storage during read_data, and the stored bytes its plans needed (read amplification).
    read_bytes: Bytes | None = None
    needed_bytes: Bytes | None = None

    @classmethod
    def of(
        cls,
        seconds: Sequence[float],
        io_seconds: Sequence[float],
        planning_seconds: Sequence[float] | None = None,
        *,
        finish_seconds: Sequence[float] | None = None,
        blocked_seconds: Sequence[float] | None = None,
        staging_seconds: Sequence[float] | None = None,
        background_seconds: Sequence[float] | None = None,
        gc_seconds: Sequence[float] | None = None,
        started_at: Sequence[float] | None = None,
        ended_at: Sequence[float] | None = None,
        read_bytes: int | None = None,
        needed_bytes: int | None = None,
    ) -> OpTiming:
        planning = planning_seconds if planning_seconds else [0.0] * len(seconds)
        finish = finish_seconds if finish_seconds and any(finish_seconds) else None
        collected = gc_seconds if gc_seconds and any(gc_seconds) else None
        return cls(
            stats=OpStats.of(seconds),
            io=OpStats.of(io_seconds),
            planning=OpStats.of(planning),
            finish=OpStats.of(finish) if finish else None,
            blocked=OpStats.of(blocked_seconds) if blocked_seconds else None,
            staging=OpStats.of(staging_seconds) if staging_seconds else None,
            background=OpStats.of(background_seconds) if background_seconds else None,
            gc=OpStats.of(collected) if collected else None,
            seconds=_rounded(seconds),
            io_seconds=_rounded(io_seconds),
            planning_seconds=_rounded(planning),
            finish_seconds=_rounded(finish) if finish else None,
            blocked_seconds=_rounded(blocked_seconds) if blocked_seconds else None,
            staging_seconds=_rounded(staging_seconds) if staging_seconds else None,
            background_seconds=_rounded(background_seconds) if background_seconds else None,
            gc_seconds=_rounded(collected) if collected else None,
            started_at=_rounded(started_at) if started_at else None,
            ended_at=_rounded(ended_at) if ended_at else None,
            read_bytes=read_bytes,
            needed_bytes=needed_bytes,
        )

    def without_samples(self) -> OpTiming:
        return self.model_copy(update=dict.fromkeys(_SAMPLE_LISTS))


_SAMPLE_LISTS = (
    "seconds",
    "io_seconds",
    "planning_seconds",
    "finish_seconds",
    "blocked_seconds",
    "staging_seconds",
    "background_seconds",
    "gc_seconds",
    "started_at",
    "ended_at",
)


class RankResources(BaseModel):
    """What one rank's process used while it benchmarked (the loop, start to end)."""

    model_config = ConfigDict(frozen=True)

    cpu_user_seconds: Seconds = Field(description="CPU seconds in user mode, every thread.")
    cpu_system_seconds: Seconds = Field(description="CPU seconds in the kernel, every thread.")
    peak_rss_bytes: Bytes | None = Field(
        None,
        description="The process's peak resident set size (VmHWM; docs/measurement.md, "
        '"Peak memory"). Absent where /proc cannot be read.',
    )
    sent_bytes: Bytes = Field(description="Bytes sent to storage (writes, uploads, retries).")
    received_bytes: Bytes = Field(description="Bytes received from storage (every read).")
    node_memory_bytes: Bytes | None = Field(
        None, description="The node's RAM (its page cache is the node's): MLPerf's 3 x RAM rule."
    )


class TrainTiming(BaseModel):
    """One rank's training step beside its saves (``train_every`` set; docs/measurement.md,
    "A training step beside the saves"). Step statistics are in seconds; ``overhead`` is a
    fraction of the interval's baseline compute, per checkpoint interval."""

    model_config = ConfigDict(frozen=True)

    every: Count = Field(description="K: steps per checkpoint interval.")
    matrix: Count = Field(description="The step's (N, N) float32 matrix side.")
    step_threads: Count = Field(description="torch's intra-op threads the step ran on.")
    cpus: Count = Field(description="CPUs this rank's process may run on (step and upload).")
    step: OpStats = Field(description="Baseline steps: no checkpoint anywhere.")
    in_flight_step: OpStats | None = Field(
        None, description="Steps that began while this rank's save was still uploading."
    )
    in_flight_steps: Count = 0
    wait: OpStats = Field(description="Per interval: the wait for the previous save.")
    stall: OpStats = Field(description="Per interval: the save call until it returned.")
    overhead: OpStats = Field(
        description="Per interval: (wait + stall + extra step time) / (K x baseline median)."
    )


class BothTiming(BaseModel):
    """One rank's windows of both demands at once (``data_loading`` set; results/both.py), by
    kind; bounded: statistics, not lists. Seconds throughout, but ``au_*`` (fractions) and the
    sample counts."""

    model_config = ConfigDict(frozen=True)

    every: Count = Field(description="Steps per window (trainEvery).")
    cycles: Count = Field(description="Cycles of the three windows run.")
    compute_seconds: float = Field(ge=0, description="The accelerator's compute per step.")
    step_alone: OpStats = Field(description="Per loader-alone window: its seconds per step.")
    step_together: OpStats = Field(description="Per together window: its seconds per step.")
    au_alone: OpStats = Field(description="Per loader-alone window: compute / window seconds.")
    au_together: OpStats = Field(description="Per together window: compute / window seconds.")
    samples_alone: Count = Field(description="Samples handed over in loader-alone windows.")
    samples_together: Count = Field(description="Samples handed over in together windows.")
    stall_alone: OpStats = Field(description="Per save-alone window: the save call's stall.")
    stall_together: OpStats = Field(description="Per together window: the save call's stall.")
    save_alone: OpStats = Field(description="Per save-alone window: the call until durable.")
    save_together: OpStats = Field(description="Per together window: the call until durable.")


class Leftovers(BaseModel):
    """Objects a run could not delete, and the folder ``ckptbench clean`` removes them from: said
    in every output, so nothing stays behind unnoticed."""

    model_config = ConfigDict(frozen=True)

    objects: Count = Field(description="Objects (or files) left.")
    under: str = Field(
        max_length=1024, description="The run's folder they lie under, as clean takes it."
    )

    def notice(self) -> str:
        """One line naming the count, the folder and the command that removes them."""
        noun = "object" if self.objects == 1 else "objects"
        them = "it" if self.objects == 1 else "them"
        return (
            f"{self.objects} {noun} left under {self.under}: "
            f"remove {them} with `ckptbench clean {self.under}`"
        )


class RankResult(BaseModel):
    """What one rank reports. ``save``/``load`` are absent when the rank failed before them;
    ``delete`` also when checkpoints are kept (nothing was deleted)."""

    model_config = ConfigDict(frozen=True)

    v: int = SCHEMA_VERSION
    rank: int = Field(ge=0, le=MAX_COUNT)
    host: str = Field("", max_length=253)
    bytes: Bytes = Field(0, description="Tensor bytes in this rank's shard: what it saves.")
    load_bytes: Bytes | None = Field(
        None,
        description=(
            "Tensor bytes this rank's load template holds: what it loads. Equal to bytes, except "
            "on a resharding load (0 on a rank outside the load world). None: not recorded."
        ),
    )
    save: OpTiming | None = None
    load: OpTiming | None = None
    delete: OpTiming | None = Field(
        None,
        description="Deleting each timed sample's checkpoint: its own objects (io) and, on rank "
        "0, the sweep of what is left (finish). None when checkpoints are kept.",
    )
    train: TrainTiming | None = None
    both: BothTiming | None = None
    checkpointer_peak_rss_bytes: Bytes | None = Field(
        None,
        description="save_mode process: the checkpointer process's peak resident memory "
        "(VmHWM), which the rank's own (resources.peak_rss_bytes) does not count.",
    )
    verified: bool | None = Field(None, description="Every load verified; None when not checked.")
    resources: RankResources | None = Field(
        None, description="CPU seconds, peak RSS and storage traffic of the rank's loop."
    )
    setup_seconds: Seconds | None = Field(
        None, description="Making the storage client and authenticating, once, before timing."
    )
    read_paths: Annotated[dict[str, Count], Field(max_length=16)] | None = Field(
        None,
        description=(
            "gcs: loaded items per read path: direct (ranged reads into the tensor), scattered "
            "(into the tensor within a coalesced read), copied (payload copied from a coalesced "
            "read), generic (torch.load), bytes (non-tensors)."
        ),
    )
    left_behind: str | None = Field(
        None,
        description=(
            "After a failure: what this rank could not delete of the failed sample's "
            "checkpoint (a count, the first names and the first error)."
        ),
    )
    left: Leftovers | None = Field(
        None,
        description="After a failure: the objects this rank could not delete that are its own to "
        "delete (its own data objects; on rank 0 also .metadata and whatever no other rank's "
        "prefix names), so the run's count is their sum.",
    )
    run: RunSamples | None = Field(
        None,
        description="Rank 0: every rank's per-sample lists reduced to the run's (run_samples.py), "
        "which its message keeps when the ranks' own lists no longer fit.",
    )
    error: str | None = None
    procedure: Procedure = Field(Procedure.CKPTBENCH, description="The procedure that ran.")
    cache: CacheMode | None = Field(
        None, description="file backend: whether written files were evicted before each load."
    )
    checkpoint: Annotated[dict[str, Bytes], Field(max_length=16)] | None = Field(
        None,
        description=(
            "Rank 0: the first timed checkpoint as storage holds it (payload_bytes, stored_bytes, "
            "objects, metadata_bytes; for a model stored_items, metadata_bytes_estimate)."
        ),
    )

    def to_termination_message(self, limit: int = TERMINATION_MESSAGE_LIMIT) -> str:
        """Compact JSON of at most ``limit`` bytes: samples go first, then the error is cut."""
        text = self._compact()
        if len(text.encode()) <= limit:
            return text
        if self.run is not None:  # lossless first: figures are computed again from vectors
            text = self.model_copy(update={"run": self.run.without_figures()})._compact()
            if len(text.encode()) <= limit:
                return text
        slim = self.model_copy(
            update={
                "save": self.save.without_samples() if self.save else None,
                "load": self.load.without_samples() if self.load else None,
                "delete": self.delete.without_samples() if self.delete else None,
            }
        )
        text = slim._compact()
        overflow = len(text.encode()) - limit
        if overflow > 0 and slim.error:
            keep = max(0, len(slim.error) - overflow - 16)
            slim = slim.model_copy(update={"error": slim.error[:keep] + "…"})
            text = slim._compact()
        if len(text.encode()) > limit and slim.run is not None:  # the vectors alone, if they fit
            text = slim.model_copy(update={"run": slim.run.without_figures()})._compact()
            if len(text.encode()) > limit:
                # They do not (docs/measurement.md): their figures, a fixed size, do.
                slim = slim.model_copy(update={"run": slim.run.without_vectors()})
                text = slim._compact()
        if len(text.encode()) > limit and slim.run is not None:
            # Not even those (a long error kept): the status then says it fell back.
            text = slim.model_copy(update={"run": None})._compact()
        return text

    @classmethod
    def from_termination_message(cls, text: str) -> RankResult:
        return cls.model_validate_json(text)

    def _compact(self) -> str:
        return self.model_dump_json(exclude_none=True)

    @staticmethod
    def error_text(exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}"
        return text if len(text) <= _ERROR_LIMIT else text[: _ERROR_LIMIT - 1] + "…"


def _rounded_or_none(x: float | None) -> float | None:
    return None if x is None else round(x, ROUND)


def _rounded(xs: Sequence[float]) -> list[float]:
    return [round(x, ROUND) for x in xs]
