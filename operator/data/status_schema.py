"""The typed ``.status`` of a DataLoadingBenchmark: what the operator writes and what the CRD says.

:func:`~ckptbench.operator.data.status.compute_status` returns a :class:`DataLoadingStatus`; the
runtime patches its ``status_body``, and the CRD's status schema is :func:`status_schema` of the
same class (``kubectl explain dlb.status``). The parts a CheckpointBenchmark's status has too
(conditions, failed pods, unreadable results, rank errors) are its classes, so both kinds say
them alike. Every figure is the workload's (``workload/contract/data/figures.py``), under the
status's camelCase name; docs/data-loading.md#figures defines each.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ckptbench.operator.spec.crd import model_schema
from ckptbench.operator.spec.status_schema import (
    CONDITIONS_LIST_MAP,
    MAX_CONDITIONS,
    Condition,
    PodFailure,
    RankErrorEntry,
    StatusModel,
    Unreadable,
)
from ckptbench.workload.contract.results.summaries import Interval

EPOCHS_LISTED = 100  # epochs whose seconds the status lists; count counts them all


class Epochs(StatusModel):
    """The epochs read: each one's seconds, its slowest rank's."""

    count: int = Field(description="Epochs read.")
    seconds: list[float] = Field(
        description="Each epoch's seconds, the first 100.", max_length=EPOCHS_LISTED
    )


class Waits(StatusModel):
    """How long the accelerators waited for a batch: the stall the loader put on training."""

    p50_seconds: float | None = Field(None, description="Median batch wait.")
    p90_seconds: float | None = Field(None, description="90th percentile of the batch waits.")
    p99_seconds: float | None = Field(None, description="99th percentile of the batch waits.")


class DataLoadingStatus(StatusModel):
    """Observed state, written by the operator: phase, conditions, ranks reported, the run's
    figures. Lists are bounded (the first few), whatever the world size."""

    # Optional, all: a failed reconcile's ReconcileError condition may be the first status written.
    phase: str | None = Field(None, description="Pending, Queued, Running, Succeeded or Failed.")
    reason: str | None = Field(
        None,
        description="Why the benchmark is in its phase, in one CamelCase word (AllRanksSucceeded, "
        "ResultsMissing, ForeignJobSet, InvalidSpec, ...).",
    )
    message: str | None = Field(None, description="Why, for a person.")
    failure_reason: str | None = Field(None, description="When Failed: the message again.")
    observed_generation: int | None = Field(None, description="The spec generation observed.")
    spec_hash: str | None = Field(None, description="The hash of the spec the JobSet ran.")
    job_set_name: str | None = Field(None, description="The benchmark's JobSet.")
    ranks_expected: int | None = Field(None, description="worldSize: the pods that run.")
    ranks_reported: int | None = Field(None, description="Ranks whose result was read.")
    ranks_summary: str | None = Field(None, description="reported/expected.")
    missing_rank_count: int | None = Field(None, description="Ranks without a result.")
    missing_ranks: list[int] | None = Field(None, description="The first 20 of them.")
    accelerators: int | None = Field(None, description="Emulated accelerators, all ranks.")
    samples: int | None = Field(None, description="Samples handed to the accelerators.")
    bytes: int | None = Field(None, description="Sample bytes handed to the accelerators.")
    samples_per_second: float | None = Field(None, description="Samples over the epochs' seconds.")
    samples_per_second_interval: Interval | None = Field(
        None, description="Its 95% interval over the epochs; absent with one epoch."
    )
    bytes_per_second: float | None = Field(None, description="Bytes over the epochs' seconds.")
    bytes_per_second_interval: Interval | None = Field(
        None, description="Its 95% interval over the epochs; absent with one epoch."
    )
    throughput: str | None = Field(None, description="bytesPerSecond for people (1024-based).")
    accelerator_utilization: float | None = Field(
        None,
        description="AU: the accelerators' mean compute over loop seconds (0 to 1); absent "
        "without emulated compute.",
    )
    accelerator_utilization_interval: Interval | None = Field(
        None, description="Its 95% interval over the accelerators."
    )
    accelerator_utilization_min: float | None = Field(None, description="The lowest AU.")
    au_floor: float | None = Field(None, description="The preset's AU floor, when it has one.")
    au_passed: bool | None = Field(None, description="The AU is at or above the floor.")
    sustained_accelerators: int | None = Field(
        None,
        description="The accelerators kept at or above the AU floor; absent: none were, or no "
        "floor applies.",
    )
    first_batch_seconds: float | None = Field(
        None, description="Time to first batch: the longest wait for an accelerator's first."
    )
    waits: Waits | None = Field(None, description="The accelerators' waits for a batch.")
    epochs: Epochs | None = Field(None, description="The epochs read.")
    verified: bool | None = Field(None, description="Every byte read matched its checksum.")
    slowest_rank: int | None = Field(None, description="The rank with the longest own epochs.")
    slowest_rank_pod: str | None = Field(None, description="Its pod.")
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
        max_length=MAX_CONDITIONS,
        json_schema_extra=CONDITIONS_LIST_MAP,
    )


def status_schema() -> dict[str, Any]:
    """The CRD's status schema (openAPIV3): typed, so ``kubectl explain dlb.status`` works; unknown
    fields are kept, so an operator newer than its CRD (Helm never upgrades a chart's CRDs)
    loses nothing it reports."""
    return {**model_schema(DataLoadingStatus), "x-kubernetes-preserve-unknown-fields": True}
