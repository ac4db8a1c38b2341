"""The typed schema of a CheckpointBenchmark's ``.status``, for the CRD (``kubectl explain``).

The operator writes the status as plain JSON (``ckptbench.operator.status.compute``); this model
only describes it, so adding a status field is one field here plus the line that sets it, and a
test fails when the operator writes a field this model does not declare. The CRD keeps unknown
status fields as well: an operator newer than its CRD must not lose what it reports.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Schema(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Condition(_Schema):
    """A metav1-style condition."""

    type: str = Field(description="JobSetCreated, Admitted, Complete, Failed, ...")
    status: str = Field(description="True, False or Unknown.")
    reason: str = Field(description="Why, in one CamelCase word.")
    message: str = Field(description="Why, for a person.")
    last_transition_time: str = Field(description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(None, description="The spec generation it reflects.")


class Operation(_Schema):
    """One operation (save or load) over the timed samples; a collective lasts as long as its
    slowest rank, sample by sample."""

    samples: int = Field(description="Timed samples.")
    mean_seconds: float = Field(description="Mean collective seconds, barrier to barrier.")
    stdev_seconds: float = Field(description="Standard deviation of the collective seconds.")
    p50_seconds: float = Field(description="Median collective seconds.")
    p90_seconds: float = Field(description="90th percentile of the collective seconds.")
    max_seconds: float = Field(description="Longest sample.")
    min_seconds: float = Field(description="Shortest sample.")
    throughput_bytes_per_second: float = Field(
        description="Checkpoint bytes / mean collective seconds."
    )
    throughput: str = Field(description="The same, for people (1024-based units).")
    min_rank_throughput_bytes_per_second: float = Field(
        description="The slowest rank's own bytes / own I/O seconds (MLPerf Storage's figure)."
    )
    slowest_rank: int = Field(description="The rank with the longest own I/O time.")
    slowest_rank_seconds: float = Field(description="That rank's mean I/O seconds.")
    fastest_rank_seconds: float = Field(description="The fastest rank's mean I/O seconds.")
    planning_seconds: float = Field(description="Largest per-rank mean planning seconds.")
    collective_overhead_seconds: float = Field(
        description="Mean collective seconds beyond the slowest rank's planning plus I/O."
    )
    rank_io_seconds: list[float] | None = Field(
        None, description="Each rank's mean I/O seconds, by rank (small worlds only)."
    )
    slowest_rank_pod: str | None = Field(None, description="The slowest rank's pod.")
    blocked_mean_seconds: float | None = Field(
        None, description="Async save: mean seconds the caller was blocked (includes staging)."
    )
    gc_seconds: float | None = Field(
        None,
        description="Largest per-rank mean seconds of automatic garbage collection inside the "
        "operation (absent when none ran).",
    )


class RankErrorEntry(_Schema):
    rank: int = Field(description="The rank that reported the error.")
    pod: str = Field(description="Its pod.")
    error: str = Field(description="The error, cut to 200 characters.")


class FailedPod(_Schema):
    pod: str = Field(description="The pod.")
    reason: str = Field(description="The container's or pod's reason (Error, OOMKilled, ...).")
    rank: int | None = Field(None, description="Its rank, when known.")
    exit_code: int | None = Field(None, description="The container's exit code.")
    error: str | None = Field(None, description="What the rank or the kubelet said.")


class UnreadableResult(_Schema):
    pod: str = Field(description="The pod.")
    rank: int | None = Field(None, description="Its rank, when known.")
    problem: str = Field(description="Why its termination message is no result.")


class BenchmarkStatus(_Schema):
    """Observed state, written by the operator: phase, conditions, ranks reported, save and load
    summaries. Lists are bounded (the first few), whatever the world size."""

    # Optional, all: a failed reconcile's ReconcileError condition may be the first status written.
    phase: str | None = Field(None, description="Pending, Queued, Running, Succeeded or Failed.")
    reason: str | None = Field(
        None,
        description="Why the benchmark is in its phase, in one CamelCase word (AllRanksSucceeded, "
        "RendezvousTimeout, ResultsMissing, ForeignJobSet, InvalidSpec, ...).",
    )
    message: str | None = Field(None, description="Why, for a person.")
    failure_reason: str | None = Field(None, description="When Failed: the message again.")
    observed_generation: int | None = Field(None, description="The spec generation observed.")
    job_set_name: str | None = Field(None, description="The benchmark's JobSet.")
    ranks_expected: int | None = Field(None, description="worldSize.")
    ranks_reported: int | None = Field(None, description="Ranks whose result was read.")
    ranks_summary: str | None = Field(None, description="reported/expected.")
    missing_rank_count: int | None = Field(None, description="Ranks without a result.")
    missing_ranks: list[int] | None = Field(None, description="The first 20 of them.")
    checkpoint_bytes: int | None = Field(None, description="Bytes in one checkpoint.")
    checkpoint_size: str | None = Field(None, description="The same, for people.")
    save: Operation | None = Field(None, description="The saves.")
    load: Operation | None = Field(None, description="The loads.")
    slowest_rank: int | None = Field(None, description="The rank with the longest own I/O.")
    verified: bool | None = Field(None, description="Every loaded tensor matched (when verified).")
    procedure: str | None = Field(None, description="The procedure that ran.")
    cache: str | None = Field(None, description="Backend file: page cache dropped or kept.")
    mlperf: dict[str, float] | None = Field(
        None, description="The mlperf procedure's figures under MLPerf Storage's metric names."
    )
    rank_error_count: int | None = Field(None, description="Ranks that reported an error.")
    rank_errors: list[RankErrorEntry] | None = Field(None, description="The first 10.")
    failed_pod_count: int | None = Field(None, description="Pods that failed.")
    failed_pods: list[FailedPod] | None = Field(None, description="The first 10.")
    unreadable_result_count: int | None = Field(None, description="Results that were unreadable.")
    unreadable_results: list[UnreadableResult] | None = Field(None, description="The first 10.")
    start_time: str | None = Field(None, description="When the first rank started.")
    completion_time: str | None = Field(None, description="When the run ended.")
    conditions: list[Condition] | None = Field(None, description="metav1-style conditions.")
