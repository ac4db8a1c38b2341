"""The typed ``.status`` of a CheckpointBenchmark: what the operator writes and what the CRD says.

:func:`~ckptbench.operator.status.compute.compute_status` returns a :class:`BenchmarkStatus`; the
runtime patches :func:`status_body` of it, and the CRD's status schema is generated from the same
classes (``kubectl explain ckb.status``). Every class forbids undeclared fields, so a field the
schema does not describe cannot be written. One class per concept: an operation's summary is the
workload's :class:`OpSummary`, a listed rank error its :class:`RankError`, each with what the
status adds (a readable throughput, the pod's name).

The CRD also keeps status fields it does not know: Helm never upgrades a chart's CRDs, and an
operator newer than its CRD must not lose what it reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict, JsonSchemaExtraCallable

from ckptbench.workload.contract.results.rank import RankResources
from ckptbench.workload.contract.results.summaries import (
    BothSummary,
    OpSummary,
    RankError,
    RankSpread,
    ResourceSummary,
    TrainSummary,
)

# The status's names for two of OpSummary's fields, as the status has always written them.
_WIRE_NAMES = {"planning_mean_seconds": "planningSeconds", "gc_mean_seconds": "gcSeconds"}


def wire_name(field: str) -> str:
    """The status's (camelCase) name of a field."""
    return _WIRE_NAMES.get(field) or to_camel(field)


def _described(descriptions: Mapping[str, str]) -> JsonSchemaExtraCallable:
    """Fill the descriptions the workload's classes leave out, for ``kubectl explain``."""

    def fill(schema: JsonDict) -> None:
        properties = schema["properties"]
        assert isinstance(properties, dict)
        for name, text in descriptions.items():
            field = properties[name]
            assert isinstance(field, dict)
            field.setdefault("description", text)

    return fill


def _config(json_schema_extra: JsonSchemaExtraCallable | None = None) -> ConfigDict:
    return ConfigDict(
        alias_generator=wire_name,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        json_schema_extra=json_schema_extra,
    )


class StatusModel(BaseModel):
    """A part of a status: camelCase on the wire, undeclared fields refused, built once."""

    model_config = _config()


class Condition(StatusModel):
    """A metav1-style condition."""

    type: str = Field(description="JobSetCreated, Admitted, Complete, Failed, ...")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="Why, in one CamelCase word.")
    message: str = Field(description="Why, for a person.")
    last_transition_time: str = Field(description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(None, description="The spec generation it reflects.")


# The operator writes six condition types at most (status/phases.py); the CRD's bound leaves room.
MAX_CONDITIONS = 16
# Conditions are a map keyed by type, as Kubernetes' own (metav1.Condition lists): one entry per
# type, and server-side apply merges them by type instead of replacing the whole list.
CONDITIONS_LIST_MAP: JsonDict = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}


class Spread(RankSpread):
    """A per-rank figure of an async save or of the training step, across ranks."""

    model_config = _config()


class Operation(OpSummary):
    """One operation (save or load) over the timed samples; a collective lasts as long as its
    slowest rank, sample by sample, barrier to barrier."""

    model_config = _config(
        json_schema_extra=_described(
            {
                "samples": "Timed samples.",
                "stdevSeconds": "Standard deviation of the collective seconds.",
                "p50Seconds": "Median collective seconds.",
                "p90Seconds": "90th percentile of the collective seconds.",
                "maxSeconds": "Longest sample.",
                "minSeconds": "Shortest sample.",
                "rank0StdevSeconds": "Standard deviation of rank 0's seconds.",
            }
        )
    )

    throughput: str = Field(description="throughputBytesPerSecond for people (1024-based units).")
    slowest_rank_pod: str | None = Field(None, description="The slowest rank's pod.")
    stall: Spread | None = Field(None, description="Async save: the call until it returns.")
    staging: Spread | None = Field(
        None, description="Async save with stagingAsync: the call until the copy is done."
    )
    background: Spread | None = Field(
        None, description="Async save: the return until the upload is durable."
    )


class Training(TrainSummary):
    """The training step beside the saves (trainEvery set)."""

    model_config = _config()

    wait: Spread = Field(description="Per interval: the wait for the previous save.")
    stall: Spread = Field(description="Per interval: the save call until it returned.")

    @classmethod
    def of(cls, train: TrainSummary) -> Training:
        return cls(**{**dict(train), "wait": spread(train.wait), "stall": spread(train.stall)})


class Both(BothSummary):
    """Both demands at once (dataLoading set): each side alone and together, and its slowdown
    (the slowest rank's ratio together / alone, with its 95% interval)."""

    model_config = _config()


def spread(figure: RankSpread) -> Spread:
    return Spread(**dict(figure))


class RankResourcesEntry(RankResources):
    """One rank's process while it benchmarked: CPU seconds, peak RSS, storage traffic."""

    model_config = _config()


class Resources(ResourceSummary):
    """The ranks' resources: the largest per rank, traffic totals, the slowest rank's own."""

    model_config = _config()

    slowest_rank_resources: RankResourcesEntry | None = Field(
        None, description="The slowest rank's own resources."
    )


class RankErrorEntry(RankError):
    """A rank that reported an error."""

    model_config = _config(
        json_schema_extra=_described(
            {
                "rank": "The rank that reported the error.",
                "host": "Its node.",
                "error": "The error, cut to 200 characters.",
            }
        )
    )

    pod: str = Field(description="Its pod.")


class PodFailure(StatusModel):
    """A pod of the current attempt that failed."""

    pod: str = Field(description="The pod.")
    reason: str = Field(description="The container's or pod's reason (Error, OOMKilled, ...).")
    rank: int | None = Field(None, description="Its rank, when known.")
    exit_code: int | None = Field(None, description="The container's exit code.")
    error: str | None = Field(None, description="What the rank or the kubelet said.")


class Unreadable(StatusModel):
    """A pod whose termination message is no result of its rank."""

    pod: str = Field(description="The pod.")
    rank: int | None = Field(None, description="Its rank, when known.")
    problem: str = Field(description="Why its termination message is no result.")


class BenchmarkStatus(StatusModel):
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
    ranks_expected: int | None = Field(
        None, description="worldSize, or loadWorldSize when larger: the pods that run."
    )
    ranks_reported: int | None = Field(None, description="Ranks whose result was read.")
    ranks_summary: str | None = Field(None, description="reported/expected.")
    missing_rank_count: int | None = Field(None, description="Ranks without a result.")
    missing_ranks: list[int] | None = Field(None, description="The first 20 of them.")
    checkpoint_bytes: int | None = Field(None, description="Bytes in one checkpoint.")
    checkpoint_size: str | None = Field(None, description="The same, for people.")
    save: Operation | None = Field(None, description="The saves.")
    load: Operation | None = Field(None, description="The loads.")
    delete: Operation | None = Field(
        None,
        description="The deletes of the timed checkpoints (absent when checkpoints are kept); "
        "throughput is checkpoint bytes deleted per second.",
    )
    slowest_rank: int | None = Field(
        None, description="The rank with the longest own I/O, saves and loads together."
    )
    resources: Resources | None = Field(
        None,
        description="CPU seconds, peak RSS and storage traffic per rank, and the slowest "
        "rank's own.",
    )
    train: Training | None = Field(None, description="The training step beside the saves.")
    both: Both | None = Field(
        None, description="Both demands at once: the loader's and the checkpoints' slowdowns."
    )
    checkpointer_peak_rss_bytes: int | None = Field(
        None,
        description="saveMode process: the largest peak of a rank's checkpointer process (the "
        "ranks' own: resources.maxPeakRssBytes).",
    )
    verified: bool | None = Field(None, description="Every loaded tensor matched (when verified).")
    procedure: str | None = Field(None, description="The procedure that ran.")
    cache: str | None = Field(None, description="Backend file: page cache dropped or kept.")
    mlperf: dict[str, float] | None = Field(
        None, description="The mlperf procedure's figures under MLPerf Storage's metric names."
    )
    mlperf_category: str | None = Field(
        None, description="mlperf procedure: CLOSED (only the checkpoint folder changed) or OPEN."
    )
    mlperf_open_reasons: list[str] | None = Field(
        None, description="Why OPEN: each setting MLPerf's CLOSED rules fix that differs."
    )
    ram_rule: str | None = Field(
        None,
        description="Backend file: MLPerf's 3 x RAM rule (met by size, met by eviction, not met).",
    )
    rank_error_count: int | None = Field(None, description="Ranks that reported an error.")
    rank_errors: list[RankErrorEntry] | None = Field(None, description="The first 10.")
    failed_pod_count: int | None = Field(None, description="Pods that failed.")
    failed_pods: list[PodFailure] | None = Field(None, description="The first 10.")
    unreadable_result_count: int | None = Field(None, description="Results that were unreadable.")
    unreadable_results: list[Unreadable] | None = Field(None, description="The first 10.")
    start_time: str | None = Field(None, description="When the first rank started.")
    completion_time: str | None = Field(None, description="When the run ended.")
    conditions: list[Condition] | None = Field(
        None,
        description="metav1-style conditions.",
        # A bound lets the API server estimate the cost of the CRD's rule that reads them.
        max_length=MAX_CONDITIONS,
        json_schema_extra=CONDITIONS_LIST_MAP,
    )


def status_body(status: BaseModel) -> dict[str, Any]:
    """A status as the API takes it: camelCase JSON, absent fields left out."""
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)
