"""Why a run failed: the first failed rank and a hint a person can act on, or the JobSet's word."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ckptbench.operator.spec.status_schema import PodFailure
from ckptbench.operator.status.phases import RunSpec
from ckptbench.operator.status.pods import Reports, excerpt
from ckptbench.workload.contract.results.summaries import RunSummary


def jobset_conditions(jobset: Mapping[str, Any] | None) -> dict[str, str]:
    if jobset is None:
        return {}
    found: dict[str, str] = {}
    for c in (jobset.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and isinstance(c.get("type"), str):
            found[c["type"]] = str(c.get("status", "Unknown"))
    return found


def terminal_transition(jobset: Mapping[str, Any] | None) -> str | None:
    for c in ((jobset or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Completed", "Failed") and c.get("status") == "True":
            value = c.get("lastTransitionTime")
            return value if isinstance(value, str) else None
    return None


def _jobset_failure_message(jobset: Mapping[str, Any] | None) -> str:
    for c in ((jobset or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Failed" and c.get("status") == "True":
            return excerpt(f"{c.get('reason', 'Failed')}: {c.get('message', '')}".rstrip(": "))
    return "Failed"


Classify = Callable[[PodFailure], tuple[str, str]]  # a failed pod's reason and hint


def pod_failure(
    max_restarts: int,
    failures: Sequence[PodFailure],
    jobset: Mapping[str, Any] | None,
    classify: Classify,
) -> tuple[str, str] | None:
    """(reason, message) when a pod's failure is final, naming the first failed rank and why
    (``classify`` gives the reason and a hint), or when the JobSet failed; any kind of benchmark."""
    jobset_failed = jobset_conditions(jobset).get("Failed") == "True"
    # With restarts left, JobSet recreates every rank after a failure: not final yet.
    pod_failure_is_final = max_restarts == 0 or jobset_failed
    if failures and pod_failure_is_final:
        first = failures[0]
        reason, hint = classify(first)
        code = f" with exit code {first.exit_code}" if first.exit_code is not None else ""
        rank = f"rank {first.rank} " if first.rank is not None else ""
        others = len(failures) - 1
        more = f" ({others} more pods failed)" if others else ""
        why = f": {first.error}" if first.error else f" ({first.reason})"
        return reason, f"{rank}pod {first.pod} failed{code}{why}{more}. {hint}".strip()
    if jobset_failed:
        return "JobSetFailed", f"the JobSet failed: {_jobset_failure_message(jobset)}"
    return None


def failure(
    spec: RunSpec,
    summary: RunSummary,
    reports: Reports,
    jobset: Mapping[str, Any] | None,
) -> tuple[str, str] | None:
    """(reason, message) when the run has failed, naming the first failed rank and why."""
    found = pod_failure(spec.max_restarts, reports.failures, jobset, classify)
    if found is not None:
        return found
    if summary.verified is False:
        bad = [e.rank for e in summary.errors]
        return "VerificationFailed", (
            "a loaded checkpoint differs from what was saved"
            + (f" (ranks {', '.join(map(str, bad))})" if bad else "")
            + ". Check the storage backend's integrity and retry."
        )
    if summary.error_count and summary.ranks_reported == spec.rank_count:
        first_error = summary.errors[0]
        return "RankError", f"rank {first_error.rank} reported: {excerpt(first_error.error)}"
    if jobset_conditions(jobset).get("Completed") == "True" and not summary.succeeded:
        # Automation waits on Complete=True: a run without every rank's figures is no result.
        return "ResultsMissing", _missing_message(spec, summary, reports)
    return None


def _missing_message(spec: RunSpec, summary: RunSummary, reports: Reports) -> str:
    if summary.missing_rank_count:
        listed = ", ".join(map(str, summary.missing_ranks))
        more = summary.missing_rank_count - len(summary.missing_ranks)
        ranks = f"ranks {listed}" + (f" and {more} more" if more else "")
        message = (
            f"the JobSet completed but {summary.missing_rank_count} of {spec.rank_count} ranks "
            f"left no readable result ({ranks})"
        )
    else:
        message = "the JobSet completed but the ranks' results hold no complete save and load"
    if reports.unreadable:
        message += f"; {len(reports.unreadable)} results were unreadable (see unreadableResults)"
    return message


def classify(failure: PodFailure) -> tuple[str, str]:
    """A CheckpointBenchmark pod's failure: its reason and a hint a person can act on."""
    error = (failure.error or "").lower()
    if failure.reason == "OOMKilled":
        return "OutOfMemory", (
            "The rank ran out of memory: a rank holds its whole shard in memory; raise "
            "resources.limits.memory or use a smaller layerSize/paddingSize (or model.layers)."
        )
    if "rendezvous" in error or "master_addr" in error or "did not resolve" in error:
        return "RendezvousTimeout", (
            "Rank 0 could not be reached in time: check that rank 0's pod is running and its "
            "headless-service name resolves, or raise rendezvousTimeoutSeconds."
        )
    if "verif" in error:
        return "VerificationFailed", (
            "A loaded tensor differs from what was saved: check the storage backend and retry."
        )
    if "403" in error or "401" in error or "permission" in error or "credential" in error:
        return "StorageAccessDenied", (
            "The rank could not access the checkpoint path: check serviceAccountName's "
            "Workload Identity binding and the bucket's IAM."
        )
    if failure.reason == "DeadlineExceeded":
        return (
            "DeadlineExceeded",
            "The run exceeded activeDeadlineSeconds: raise it or shrink the run.",
        )
    return "PodFailed", "See the pod's logs: kubectl logs " + failure.pod
