"""The run's summaries: the ranks' reports turned into figures, for the workload and the operator.

:func:`~ckptbench.workload.contract.results.figures.summarize` fills a :class:`RunSummary` from the
ranks' :class:`~ckptbench.workload.contract.results.rank.RankResult`: one :class:`OpSummary` per
operation, the training step's :class:`TrainSummary`, the processes' :class:`ResourceSummary`, and
the ranks that failed. The local runner prints it and the operator derives the status from it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ckptbench.workload.contract.choices import CacheMode, Procedure
from ckptbench.workload.contract.results import stats
from ckptbench.workload.contract.results.rank import SCHEMA_VERSION, Leftovers, RankResources

RANKS_LISTED = 64  # per-rank I/O seconds in the summary, bounded whatever the world size


class Interval(BaseModel):
    """A two-sided confidence interval of a figure (its level: ``intervals.CONFIDENCE``).

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


# Where an operation's per-sample figures come from (OpSummary.per_sample).
PerSampleSource = Literal["run", "slowest rank"]


class OpSummary(BaseModel):
    """One operation across all ranks, in the reference's terms and MLPerf Storage's.

    Every field is computed in :mod:`ckptbench.workload.contract.results.figures` and defined in
    docs/measurement.md. Per-rank figures come from each rank's own I/O time, measured inside the
    storage layer (barrier-to-barrier time is the same on every rank), over the ranks that moved
    bytes: a resharding load's ranks outside the load world read nothing and are left out, as
    are the ranks a restore onto more ranks adds from the save and the delete.
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
        "world; on a restore onto more ranks, the save's and delete's ranks past worldSize, "
        "which record neither), left out of the per-rank figures: min and median per-rank "
        "throughput, slowest and fastest rank.",
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
    finish_mean_seconds: float | None = Field(
        None,
        description="Save: largest per-rank mean seconds of the storage writer's finish, part "
        "of the I/O: the coordinator's .metadata write, or with format safetensors on file its "
        "consolidation of every rank's file into one (absent when it took no time).",
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
    per_sample: PerSampleSource = Field(
        "run",
        description="Where the per-sample figures (mean, stdev, percentiles, max, min, spans) "
        "come from: 'run', every rank's samples; 'slowest rank', that rank's own statistics, "
        "when neither the ranks' messages nor rank 0's carried the run's (rank 0 failed, or "
        "did not gather every rank).",
    )


class ResourceSummary(BaseModel):
    """The ranks' resources: the largest per rank, the totals of traffic, and the slowest
    rank's own (the rank whose save plus load I/O was the longest)."""

    model_config = ConfigDict(frozen=True)

    ranks: int = Field(description="Ranks that reported their resources.")
    max_cpu_user_seconds: float = Field(description="Largest CPU user seconds of a rank.")
    max_cpu_system_seconds: float = Field(description="Largest CPU system seconds of a rank.")
    max_peak_rss_bytes: int | None = Field(
        None,
        description="Largest peak RSS of a rank's process (VmHWM): the run's one peak-memory "
        "figure. Absent when no rank could read it.",
    )
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


class Slowdown(BaseModel):
    """Together / alone of a time figure's means over windows: above 1 is slower together."""

    model_config = ConfigDict(frozen=True)

    ratio: float = Field(description="Mean together / mean alone.")
    interval: Interval | None = Field(
        None, description="95% interval of the ratio (None: fewer than 2 windows a side)."
    )
    rank: int = Field(description="The rank it is of: the one with the largest ratio.")


class BothSummary(BaseModel):
    """Both demands at once across ranks (results/both.py): each side alone and together,
    and its slowdown."""

    model_config = ConfigDict(frozen=True)

    every: int = Field(description="Steps per window.")
    cycles: int = Field(description="Cycles of save-alone, together, loader-alone windows.")
    samples_per_second_alone: float = Field(description="All ranks' samples / their seconds.")
    samples_per_second_together: float = Field(description="The same, in together windows.")
    au_alone: float = Field(description="Mean over ranks of each rank's mean window AU.")
    au_together: float = Field(description="The same, in together windows.")
    save_seconds_alone: float = Field(description="Mean over ranks of the mean save (to durable).")
    save_seconds_together: float = Field(description="The same, the loader reading.")
    stall_seconds_alone: float = Field(description="Mean over ranks of the mean stall.")
    stall_seconds_together: float = Field(description="The same, the loader reading.")
    loader_slowdown: Slowdown = Field(description="Step seconds, together / loader alone.")
    save_slowdown: Slowdown = Field(description="Save seconds, together / save alone.")
    stall_slowdown: Slowdown = Field(description="Stall seconds, together / save alone.")


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


def rank_count(world_size: int, load_world_size: int | None) -> int:
    """The ranks a run has: ``world_size``, or ``load_world_size`` when a restore is onto more
    (the settings' ``rank_count``, for results, which carry the two numbers alone)."""
    return max(world_size, load_world_size or 0)


class RunSummary(BaseModel):
    """The whole run. Bounded in size whatever the world size: per-rank detail is not kept here."""

    model_config = ConfigDict(frozen=True)

    v: int = SCHEMA_VERSION
    world_size: int = Field(description="Ranks that saved (worldSize).")
    load_world_size: int | None = Field(
        None,
        description="Ranks that loaded, resharding, when set (loadWorldSize); above world_size "
        "the run had that many ranks, the last ones saving nothing.",
    )
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
    both: BothSummary | None = Field(
        None, description="Both demands at once (dataLoading set): each side's slowdown."
    )
    train: TrainSummary | None = Field(
        None, description="The training step beside the saves (trainEvery set)."
    )
    checkpointer_peak_rss_bytes: int | None = Field(
        None,
        description="saveMode process: the largest peak resident memory of a rank's "
        "checkpointer process (a second process: not in resources.max_peak_rss_bytes).",
    )
    left: Leftovers | None = Field(
        None,
        description="Objects the run's cleanup could not delete after a failure, and the folder "
        "`ckptbench clean` removes them from; absent when nothing was left.",
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
        "from the settings (contract/results/mlperf_rules.py).",
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
    def rank_count(self) -> int:
        """The ranks the run had: world_size, or load_world_size when larger."""
        return rank_count(self.world_size, self.load_world_size)

    @property
    def succeeded(self) -> bool:
        return (
            self.ranks_reported == self.rank_count
            and self.error_count == 0
            and self.verified is not False
            and self.save is not None
            and self.load is not None
        )
