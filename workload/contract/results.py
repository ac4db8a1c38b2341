"""Result models, shared by the workload and the operator.

A rank reports a :class:`RankResult`. Its compact JSON form is the container's termination
message (Kubernetes keeps at most 4 KiB of it), so it always carries summary statistics and keeps
the per-sample lists only while they fit. :func:`~ckptbench.workload.contract.figures.summarize`
turns the ranks' results into one :class:`RunSummary`, computing every figure once; the local
runner prints it and the operator derives the status from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from ckptbench.workload.contract import stats
from ckptbench.workload.contract.choices import CacheMode, Procedure

SCHEMA_VERSION = 2
TERMINATION_MESSAGE_LIMIT = 4096
_ERROR_LIMIT = 1000
ROUND = 6  # microseconds: far below any measured operation, and keeps the JSON short
RANKS_LISTED = 64  # per-rank I/O seconds in the summary, bounded whatever the world size

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
    peak_rss_bytes: Bytes = Field(description="The process's peak resident set size.")
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
    peak_rss_bytes: Bytes | None = Field(
        None, description="This rank's process's peak resident memory (VmHWM)."
    )
    checkpointer_peak_rss_bytes: Bytes | None = Field(
        None, description="save_mode process: the checkpointer process's peak resident memory."
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


class Interval(BaseModel):
    """A two-sided confidence interval of a figure (its level: ``figures.CONFIDENCE``).

    ``high`` None: unbounded above, for a rate whose duration's interval reaches down to 0.
    """

    model_config = ConfigDict(frozen=True)

    low: float = Field(description="Lower bound.")
    high: float | None = Field(None, description="Upper bound; absent: unbounded above.")


class RankSpread(BaseModel):
    """One per-rank figure of an operation across the ranks that timed it: each rank's mean over
    its samples, summarised as the per-rank I/O figures are (docs/measurement.md)."""

    model_config = ConfigDict(frozen=True)

    mean_seconds: float = Field(description="Mean over ranks of each rank's mean.")
    slowest_rank: int = Field(description="The rank with the largest mean.")
    slowest_rank_seconds: float = Field(description="The slowest rank's mean.")
    max_seconds: float = Field(description="The largest single sample on any rank.")
    rank_seconds: list[float] | None = Field(
        None, description=f"Each rank's mean, by rank (up to {RANKS_LISTED} ranks)."
    )


class OpSummary(BaseModel):
    """One operation across all ranks, in the reference's terms and MLPerf Storage's.

    Every field is computed in :mod:`ckptbench.workload.contract.figures` and defined in
    docs/measurement.md. Per-rank figures come from each rank's own I/O time, measured inside the
    storage layer (barrier-to-barrier time is the same on every rank), over the ranks that moved
    bytes: a resharding load's ranks outside the load world read nothing and are left out.
    """

    model_config = ConfigDict(frozen=True)

    samples: int
    mean_seconds: float = Field(description="Mean collective duration (max over ranks per sample).")
    stdev_seconds: float = Field(description="Sample stdev (n-1) of the collective durations.")
    mean_seconds_ci: Interval | None = Field(
        None,
        description="95% Student-t interval of the mean seconds; absent with fewer than 2 samples.",
    )
    p50_seconds: float
    p90_seconds: float
    p99_seconds: float | None = Field(
        None,
        description=f"99th percentile of the collective durations; only over at least "
        f"{stats.P99_MIN_SAMPLES} samples (below, it would be the max in disguise).",
    )
    max_seconds: float
    min_seconds: float
    throughput_bytes_per_second: float = Field(
        description="Total checkpoint bytes / mean collective duration (the reference's figure)."
    )
    throughput_bytes_per_second_ci: Interval | None = Field(
        None,
        description="95% interval of the throughput: total bytes over each bound of the mean's.",
    )
    min_rank_throughput_bytes_per_second: float = Field(
        description="Lowest per-rank throughput: the rank's bytes / its mean I/O seconds."
    )
    median_rank_throughput_bytes_per_second: float = Field(
        0.0, description="Median per-rank throughput: the rank's bytes / its mean I/O seconds."
    )
    ranks_left_out: int = Field(
        0,
        ge=0,
        description="Ranks that moved no bytes (a resharding load's ranks outside the load "
        "world), left out of the per-rank figures: min and median per-rank throughput, slowest "
        "and fastest rank.",
    )
    slowest_rank: int = Field(description="The rank with the largest mean I/O seconds.")
    slowest_rank_seconds: float = Field(description="The slowest rank's mean I/O seconds.")
    fastest_rank_seconds: float = Field(description="The fastest rank's mean I/O seconds.")
    planning_mean_seconds: float = Field(
        0.0, description="Largest per-rank mean planning seconds (plans made and exchanged)."
    )
    collective_overhead_seconds: float = Field(
        0.0,
        description="Mean collective duration beyond the slowest rank's planning plus I/O: "
        "waiting in DCP's collectives and barriers.",
    )
    rank_io_seconds: list[float] | None = Field(
        None,
        description=f"Each rank's mean I/O seconds, by rank (up to {RANKS_LISTED} ranks).",
    )
    rank0_mean_seconds: float | None = Field(
        None, description="Rank 0's mean barrier-to-barrier seconds: the reference's figure."
    )
    rank0_mean_seconds_ci: Interval | None = Field(
        None, description="95% Student-t interval of rank 0's mean seconds."
    )
    rank0_stdev_seconds: float | None = Field(
        None, description="Rank 0's sample stdev (n-1) of its barrier-to-barrier seconds."
    )
    stall: RankSpread | None = Field(
        None,
        description="Async save: the stall, the call until it returns (the staging copy "
        "included when the stager copies inside the call).",
    )
    staging: RankSpread | None = Field(
        None,
        description="Async save: the call until the staging copy is done, when it runs apart "
        "from the call (stagingAsync).",
    )
    background: RankSpread | None = Field(
        None, description="Async save: the return until the upload is durable, its result checked."
    )
    span_mean_seconds: float | None = Field(
        None,
        description="Mean over samples of the latest rank end minus the earliest rank start "
        "(MLPerf Storage's duration).",
    )
    span_mean_seconds_ci: Interval | None = Field(
        None, description="95% Student-t interval of the mean span."
    )
    span_throughput_bytes_per_second: float | None = Field(
        None, description="Total checkpoint bytes / mean span (MLPerf Storage's bandwidth)."
    )
    span_throughput_bytes_per_second_ci: Interval | None = Field(
        None,
        description="95% interval of the span throughput: total bytes over the mean span's bounds.",
    )
    gc_mean_seconds: float | None = Field(
        None,
        description="Largest per-rank mean seconds of automatic garbage collection inside the "
        "operation (absent when no rank collected).",
    )
    read_amplification: float | None = Field(
        None,
        description="Load: bytes the ranks read from storage during their data reads over the "
        "stored bytes their load plans needed, summed over ranks and samples (1.0: nothing "
        "read twice or in vain). Absent when no rank counted.",
    )
    max_rank_read_amplification: float | None = Field(
        None, description="Load: the largest of the same ratio per rank (ranks that needed bytes)."
    )
    seconds: list[float] | None = Field(
        None, description="Per-sample collective durations, when every rank reported them."
    )
    span_seconds: list[float] | None = Field(
        None, description="Per-sample spans, when every rank reported its start and end times."
    )


class ResourceSummary(BaseModel):
    """The ranks' resources: the largest per rank, the totals of traffic, and the slowest
    rank's own (the rank whose save plus load I/O was the longest)."""

    model_config = ConfigDict(frozen=True)

    ranks: int = Field(description="Ranks that reported their resources.")
    max_cpu_user_seconds: float = Field(description="Largest CPU user seconds of a rank.")
    max_cpu_system_seconds: float = Field(description="Largest CPU system seconds of a rank.")
    max_peak_rss_bytes: int = Field(description="Largest peak RSS of a rank.")
    max_sent_bytes: int = Field(description="Most bytes a rank sent to storage.")
    max_received_bytes: int = Field(description="Most bytes a rank received from storage.")
    sent_bytes: int = Field(description="Bytes all ranks sent to storage.")
    received_bytes: int = Field(description="Bytes all ranks received from storage.")
    slowest_rank: int | None = Field(
        None, description="The rank with the longest save plus load I/O, whose resources follow."
    )
    slowest_rank_resources: RankResources | None = Field(
        None, description="The slowest rank's own resources."
    )


class TrainSummary(BaseModel):
    """The training step beside the saves, across ranks (docs/measurement.md). A training job
    runs at the pace of its slowest rank: the overhead that counts is the slowest rank's."""

    model_config = ConfigDict(frozen=True)

    every: int = Field(description="K: steps per checkpoint interval.")
    intervals: int = Field(description="Checkpoint intervals run (each rank).")
    matrix: int = Field(description="The step's matrix side (the largest over ranks).")
    step_threads: int = Field(description="torch intra-op threads of the step (fewest over ranks).")
    cpus: int = Field(description="CPUs a rank's process may run on (fewest over ranks).")
    step_seconds: float = Field(
        description="Step time without checkpointing: mean over ranks of each rank's median."
    )
    in_flight_step_seconds: float | None = Field(
        None,
        description="Step time while a save is in flight: mean over ranks of each rank's mean.",
    )
    in_flight_steps: int = Field(0, description="Steps that ran with a save in flight, all ranks.")
    wait: RankSpread = Field(description="Per interval: the wait for the previous save.")
    stall: RankSpread = Field(description="Per interval: the save call until it returned.")
    overhead: float = Field(
        description="Overhead per checkpoint interval, the slowest rank's mean: (wait + stall + "
        "extra step time) / (K x step time). A fraction (CheckFreq's bar: 0.035)."
    )
    overhead_slowest_rank: int = Field(description="The rank with the largest mean overhead.")
    overhead_rank_mean: float = Field(description="Mean over ranks of each rank's mean overhead.")
    overhead_max: float = Field(description="The largest overhead of one interval on any rank.")


class RankError(BaseModel):
    model_config = ConfigDict(frozen=True)

    rank: int
    host: str = ""
    error: str


class RunSummary(BaseModel):
    """The whole run. Bounded in size whatever the world size: per-rank detail is not kept here."""

    model_config = ConfigDict(frozen=True)

    v: int = SCHEMA_VERSION
    world_size: int
    ranks_reported: int
    missing_ranks: list[int] = Field(
        default_factory=list, description="Ranks that did not report (at most the first 20)."
    )
    missing_rank_count: int = 0
    total_bytes: int
    shard_bytes: int = Field(description="The largest shard saved.")
    load_shard_bytes: int | None = Field(
        None,
        description="The largest shard loaded (larger than shard_bytes on a resharding load "
        "onto fewer ranks); None when no rank recorded what it loaded.",
    )
    save: OpSummary | None = None
    load: OpSummary | None = None
    delete: OpSummary | None = Field(
        None,
        description="Deleting each timed checkpoint, with the save's and load's statistics; its "
        "throughput is checkpoint bytes deleted per second. None when checkpoints are kept.",
    )
    verified: bool | None = Field(None, description="Every rank verified every load.")
    resources: ResourceSummary | None = Field(
        None, description="CPU, peak RSS and storage traffic per rank (absent: none reported)."
    )
    train: TrainSummary | None = Field(
        None, description="The training step beside the saves (trainEvery set)."
    )
    peak_rss_bytes: int | None = Field(
        None, description="The largest peak resident memory of a rank's process."
    )
    checkpointer_peak_rss_bytes: int | None = Field(
        None,
        description="saveMode process: the largest peak resident memory of a rank's "
        "checkpointer process.",
    )
    errors: list[RankError] = Field(default_factory=list, description="At most the first 10.")
    error_count: int = 0
    procedure: Procedure = Field(Procedure.CKPTBENCH, description="The procedure that ran.")
    cache: CacheMode | None = Field(
        None, description="file backend: whether written files were evicted before each load."
    )
    mlperf: dict[str, float] | None = Field(
        None, description="The mlperf procedure's figures under MLPerf Storage's metric names."
    )
    mlperf_category: str | None = Field(
        None,
        description="mlperf procedure: CLOSED (only the checkpoint folder changed) or OPEN, "
        "from the settings (contract/mlperf_rules.py).",
    )
    mlperf_open_reasons: list[str] | None = Field(
        None, description="Why the run is OPEN: each setting MLPerf's CLOSED rules fix."
    )
    ram_rule: str | None = Field(
        None,
        description="file backend: MLPerf's 3 x RAM rule, per node: met by size, met by "
        "eviction (page cache evicted before each load) or not met.",
    )
    ram_rule_written_bytes: int | None = Field(
        None, description="The bytes the node nearest to failing the rule wrote."
    )
    ram_rule_memory_bytes: int | None = Field(None, description="That node's RAM.")
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Settings and versions the result depends on."
    )

    @property
    def succeeded(self) -> bool:
        return (
            self.ranks_reported == self.world_size
            and self.error_count == 0
            and self.verified is not False
            and self.save is not None
            and self.load is not None
        )


def _rounded_or_none(x: float | None) -> float | None:
    return None if x is None else round(x, ROUND)


def _rounded(xs: Sequence[float]) -> list[float]:
    return [round(x, ROUND) for x in xs]
