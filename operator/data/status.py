"""A DataLoadingBenchmark's status: a pure function of its spec, its JobSet and its pods.

Each rank reports a :class:`DataRankResult` in its termination message; the run's figures are the
workload's own :func:`~ckptbench.workload.contract.data.figures.summarize` of them, copied into the
status under their camelCase names, never computed here. The phase, the conditions and the failed
pods come from the code a CheckpointBenchmark's status uses (``operator/status``): both run as a
JobSet of ranks, and say where they are and why alike. Deterministic: the same inputs give an
equal status, so the caller skips a patch that changes nothing; ``now`` only stamps a condition
whose status changes, or a completion never seen before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from pydantic import ValidationError

from ckptbench.operator.data.status_schema import (
    EPOCHS_LISTED,
    DataLoadingStatus,
    Epochs,
    Waits,
)
from ckptbench.operator.spec.status_schema import PodFailure, RankErrorEntry, Unreadable
from ckptbench.operator.status import compute as checkpoint_status
from ckptbench.operator.status.aggregate import LISTED, failed_pods
from ckptbench.operator.status.failure import classify, jobset_conditions, pod_failure
from ckptbench.operator.status.lifecycle import completion_time, kept_time, where
from ckptbench.operator.status.phases import FAILED, benchmark_conditions
from ckptbench.operator.status.pods import (
    RankReports,
    ReadMessages,
    current_attempt,
    excerpt,
    object_name,
    read_results,
)
from ckptbench.workload.contract.checkpoint.sizes import format_bytes
from ckptbench.workload.contract.data import figures
from ckptbench.workload.contract.data.figures import DataSummary
from ckptbench.workload.contract.data.results import DataRankResult

MISSING_LISTED = 20  # missing ranks named in the status; missingRankCount counts them all
Reports = RankReports[DataRankResult]


class DataRunSpec(Protocol):
    """What the status needs of a DataLoadingBenchmark's spec (its model provides it)."""

    @property
    def world_size(self) -> int: ...
    @property
    def resolved_au_floor(self) -> float | None: ...
    @property
    def queue_name(self) -> str | None: ...
    @property
    def max_restarts(self) -> int: ...


class DataMemo:
    """What one benchmark's reconciles keep for the next: each pod's termination message as read
    (parsed and bounded once). A status computed with it equals one computed without."""

    def __init__(self) -> None:
        self.messages = ReadMessages[DataRankResult]()


def read_message(text: str) -> DataRankResult | str:
    """One termination message: its rank's result, or why it is not a data-loading result."""
    try:
        return DataRankResult.from_message(text)
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else None
        where_ = ".".join(str(p) for p in first["loc"]) if first else ""
        why = f"{where_ or 'message'}: {first['msg']}" if first else "invalid"
        return excerpt(f"termination message is not a data-loading result ({why})")


def _against_spec(reports: Reports, world_size: int) -> Reports:
    """``reports`` with a result of a rank the run does not have moved to the unreadable."""
    beyond = [r for r in reports.results if r.rank >= world_size]
    if not beyond:
        return reports
    unreadable = list(reports.unreadable) + [
        Unreadable(
            pod=reports.result_pods.get(r.rank, ""),
            rank=r.rank,
            problem=f"reports rank {r.rank}, but the run has ranks 0 to {world_size - 1}",
        )
        for r in beyond
    ]
    kept = [r for r in reports.results if r.rank < world_size]
    return replace(reports, results=kept, unreadable=unreadable)


def classify_data(failed: PodFailure) -> tuple[str, str]:
    """A data rank's failed pod: its reason and a hint a person can act on."""
    error = (failed.error or "").lower()
    if failed.reason == "OOMKilled" or error.startswith("memoryrefused"):
        return "OutOfMemory", (
            "The rank ran out of memory: every batch in flight and each DataLoader worker count "
            "(docs/data-loading.md#memory); raise resources.limits.memory, or lower workers, "
            "prefetchFactor or batchSize."
        )
    if "403" in error or "401" in error or "permission" in error or "credential" in error:
        return "StorageAccessDenied", (
            "The rank could not access dataPath: check serviceAccountName's Workload Identity "
            "binding and the bucket's IAM."
        )
    return classify(failed)


def _failure(
    spec: DataRunSpec,
    summary: DataSummary,
    reports: Reports,
    jobset: Mapping[str, Any] | None,
    missing: Sequence[int],
) -> tuple[str, str] | None:
    """(reason, message) when the run has failed, naming the first failed rank and why."""
    found = pod_failure(spec.max_restarts, reports.failures, jobset, classify_data)
    if found is not None:
        return found
    if summary.errors and summary.ranks_reported == spec.world_size:
        rank = min(summary.errors, key=int)
        return "RankError", f"rank {rank} reported: {excerpt(summary.errors[rank])}"
    if jobset_conditions(jobset).get("Completed") == "True" and not summary.succeeded:
        listed = ", ".join(map(str, missing[:MISSING_LISTED]))
        more = len(missing) - MISSING_LISTED
        message = (
            f"the JobSet completed but {len(missing)} of {spec.world_size} ranks left no "
            f"readable result (ranks {listed}{f' and {more} more' if more > 0 else ''})"
        )
        if reports.unreadable:
            message += (
                f"; {len(reports.unreadable)} results were unreadable (see unreadableResults)"
            )
        return "ResultsMissing", message
    return None


def _rank_errors(reports: Reports) -> list[RankErrorEntry]:
    return [
        RankErrorEntry(
            rank=r.rank,
            host=r.host,
            pod=reports.result_pods.get(r.rank, ""),
            error=excerpt(r.error or ""),
        )
        for r in reports.results
        if not r.succeeded
    ][:LISTED]


def _figures(summary: DataSummary, reports: Reports) -> dict[str, Any]:
    """The run's figures as the status names them: the summary's, none recomputed."""
    if not any(r.succeeded for r in reports.results):
        return {}
    slowest = figures.slowest_rank(reports.results)
    rate = summary.bytes_per_second
    au = summary.accelerator_utilization
    return {
        "accelerators": summary.accelerators,
        "samples": summary.samples,
        "bytes": summary.bytes,
        "samples_per_second": summary.samples_per_second,
        "samples_per_second_interval": summary.samples_per_second_interval,
        "bytes_per_second": rate,
        "bytes_per_second_interval": summary.bytes_per_second_interval,
        "throughput": None if rate is None else format_bytes(rate) + "/s",
        "accelerator_utilization": au,
        "accelerator_utilization_interval": summary.accelerator_utilization_interval,
        "accelerator_utilization_min": summary.accelerator_utilization_min,
        "au_passed": summary.au_passed,
        "sustained_accelerators": figures.sustained_accelerators(
            [(summary.accelerators, au)], summary.au_floor
        ),
        "first_batch_seconds": summary.first_batch_seconds,
        "waits": Waits(
            p50_seconds=summary.batch_wait_p50_seconds,
            p90_seconds=summary.batch_wait_p90_seconds,
            p99_seconds=summary.batch_wait_p99_seconds,
        ),
        "epochs": Epochs(
            count=len(summary.epoch_seconds), seconds=summary.epoch_seconds[:EPOCHS_LISTED]
        ),
        "verified": summary.verified,
        "slowest_rank": slowest,
        "slowest_rank_pod": reports.result_pods.get(slowest) if slowest is not None else None,
    }


def compute_status(
    spec: DataRunSpec,
    jobset: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    previous: Mapping[str, Any] | None,
    now: datetime,
    *,
    generation: int | None = None,
    spec_hash: str | None = None,
    spec_change: str | None = None,
    foreign_jobset: str | None = None,
    memo: DataMemo | None = None,
) -> DataLoadingStatus:
    """The status for ``spec`` given its JobSet (None: not created yet) and the JobSet's pods.

    ``spec`` is the spec the JobSet was rendered from, ``spec_hash`` its hash. ``spec_change``
    describes an edit made after the run started, which is refused (the SpecChangeRejected
    condition); ``foreign_jobset`` why a JobSet of the benchmark's name was not adopted.
    """
    previous = previous or {}
    memo = memo if memo is not None else DataMemo()
    reports = _against_spec(
        read_results(current_attempt(pods), read_message, memo.messages), spec.world_size
    )
    summary = figures.summarize(reports.results, spec.world_size, spec.resolved_au_floor)
    reported_ranks = {r.rank for r in reports.results}
    missing = [r for r in range(spec.world_size) if r not in reported_ranks]
    at = where(
        jobset,
        foreign_jobset,
        _failure(spec, summary, reports, jobset, missing),
        summary.succeeded,
        summary.ranks_reported,
        spec.world_size,
        reports.running,
        reports.pending_reason,
        spec.queue_name,
    )
    errors = _rank_errors(reports)
    return DataLoadingStatus(
        phase=at.phase,
        reason=at.reason,
        message=at.message,
        failure_reason=at.message if at.phase == FAILED else None,
        observed_generation=generation,
        spec_hash=spec_hash,
        job_set_name=object_name(jobset) if jobset is not None else None,
        ranks_expected=spec.world_size,
        ranks_reported=summary.ranks_reported,
        ranks_summary=f"{summary.ranks_reported}/{spec.world_size}",
        missing_rank_count=len(missing) or None,
        missing_ranks=missing[:MISSING_LISTED] or None,
        au_floor=summary.au_floor,
        **_figures(summary, reports),
        rank_error_count=len(summary.errors) or None,
        rank_errors=errors or None,
        failed_pod_count=len(reports.failures) or None,
        failed_pods=failed_pods(reports) or None,
        unreadable_result_count=len(reports.unreadable) or None,
        unreadable_results=reports.unreadable[:LISTED] or None,
        start_time=kept_time(previous, "startTime") or reports.started,
        completion_time=completion_time(at.phase, previous, reports.finished, jobset, now),
        conditions=benchmark_conditions(
            spec,
            jobset,
            at.phase,
            at.reason,
            at.message,
            at.suspended,
            previous,
            now,
            generation,
            spec_change,
        ),
    )


def invalid_spec_status(
    message: str, previous: Mapping[str, Any] | None, now: datetime, *, generation: int | None
) -> DataLoadingStatus:
    """Status of a benchmark whose spec the operator cannot run: no JobSet is created. The same
    phase, reason and conditions as a CheckpointBenchmark's in that case."""
    same = checkpoint_status.invalid_spec_status(message, previous, now, generation=generation)
    return DataLoadingStatus.model_validate(same.model_dump(exclude_none=True))
