"""A CheckpointBenchmark's status: a pure function of its spec, its JobSet and its pods.

:func:`compute_status` reads the pods (:mod:`.pods`), aggregates their results with the workload's
own :func:`summarize` (:mod:`.aggregate`, which also bounds the status's size), and derives the
phase, metav1-style conditions (:mod:`.phases`) and a failure reason a person can act on
(:mod:`.failure`).

Deterministic: the same inputs give the same dict, so the caller can skip a patch that changes
nothing. ``now`` only stamps a condition whose status changes, or a completion never seen before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ckptbench.operator.status import conditions as cond
from ckptbench.operator.status.aggregate import bounded_lists, op_status, ranks_status, slowest_rank
from ckptbench.operator.status.failure import failure as find_failure
from ckptbench.operator.status.failure import terminal_transition
from ckptbench.operator.status.phases import (
    FAILED,
    FAILED_CONDITION,
    FOREIGN_JOBSET,
    JOBSET_CREATED,
    PENDING,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    TERMINAL_PHASES,
    RunSpec,
    benchmark_conditions,
)
from ckptbench.operator.status.pods import current_attempt, read_pods
from ckptbench.workload.contract import sizes
from ckptbench.workload.contract.results import summarize


def compute_status(
    spec: RunSpec,
    jobset: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    previous: Mapping[str, Any] | None,
    now: datetime,
    *,
    generation: int | None = None,
    spec_change: str | None = None,
    foreign_jobset: str | None = None,
) -> dict[str, Any]:
    """The status for ``spec`` given its JobSet (None: not created yet) and the JobSet's pods.

    ``spec`` is the spec the JobSet was rendered from. ``spec_change`` describes an edit made
    after the run started, which is refused: it becomes the SpecChangeRejected condition.
    ``foreign_jobset`` says why a JobSet of the benchmark's name, which it does not own, was not
    adopted: the benchmark waits until it is gone.
    """
    previous = previous or {}
    total = spec.total_bytes
    reports = read_pods(current_attempt(pods))
    summary = summarize(reports.results, spec.world_size, total)
    suspended = bool(jobset is not None and (jobset.get("spec") or {}).get("suspend"))

    failure = find_failure(spec, summary, reports, jobset)
    if jobset is None and foreign_jobset is not None:
        phase, reason, message = PENDING, FOREIGN_JOBSET, foreign_jobset
    elif jobset is None:
        phase, reason, message = PENDING, "JobSetNotCreated", "the JobSet has not been created yet"
    elif failure is not None:
        phase, reason, message = FAILED, failure[0], failure[1]
    elif summary.succeeded:
        phase, reason = SUCCEEDED, "AllRanksSucceeded"
        message = f"{summary.ranks_reported}/{spec.world_size} ranks reported success"
    elif suspended:
        queue = spec.queue_name or "(none)"
        phase, reason = QUEUED, "WaitingForAdmission"
        message = (
            f"the JobSet is suspended: Kueue has not admitted it to LocalQueue {queue} yet "
            "(check the queue's ClusterQueue quota and `kubectl get workloads`)"
        )
    elif reports.running > 0 or summary.ranks_reported > 0:
        phase, reason = RUNNING, "RanksRunning"
        message = (
            f"{reports.running} rank pods running, "
            f"{summary.ranks_reported}/{spec.world_size} ranks reported"
        )
    else:
        phase, reason = PENDING, "PodsPending"
        message = reports.pending_reason or "waiting for the rank pods to start"

    status: dict[str, Any] = {
        "phase": phase,
        "reason": reason,
        "message": message,
    }
    if phase == FAILED:
        status["failureReason"] = message
    if generation is not None:
        status["observedGeneration"] = generation
    if jobset is not None:
        status["jobSetName"] = (jobset.get("metadata") or {}).get("name", "")
    status.update(ranks_status(spec, summary))
    status["checkpointBytes"] = total
    status["checkpointSize"] = sizes.format_bytes(total)
    for op_name, op in (("save", summary.save), ("load", summary.load)):
        if op is not None:
            status[op_name] = op_status(op, reports.result_pods)
    slowest = slowest_rank(reports.results)
    if slowest is not None:
        status["slowestRank"] = slowest
    if summary.verified is not None:
        status["verified"] = summary.verified
    if summary.ranks_reported:
        status["procedure"] = summary.procedure.value
        if summary.cache is not None:
            status["cache"] = summary.cache.value
    if summary.mlperf:
        status["mlperf"] = summary.mlperf  # a fixed set of MLPerf Storage's names
    status.update(bounded_lists(summary, reports))
    start = previous.get("startTime") or reports.started
    if start:
        status["startTime"] = start
    if phase in TERMINAL_PHASES:
        status["completionTime"] = (
            (previous.get("completionTime") if previous.get("phase") in TERMINAL_PHASES else None)
            or reports.finished
            or terminal_transition(jobset)
            or cond.timestamp(now)
        )
    status["conditions"] = benchmark_conditions(
        spec, jobset, phase, reason, message, suspended, previous, now, generation, spec_change
    )
    return status


def invalid_spec_status(
    message: str,
    previous: Mapping[str, Any] | None,
    now: datetime,
    *,
    generation: int | None = None,
) -> dict[str, Any]:
    """Status of a benchmark whose spec the operator cannot run: no JobSet is created."""
    previous = previous or {}
    status: dict[str, Any] = {
        "phase": FAILED,
        "reason": "InvalidSpec",
        "message": message,
        "failureReason": message,
    }
    if generation is not None:
        status["observedGeneration"] = generation
    desired = [
        cond.make_condition(
            JOBSET_CREATED,
            "False",
            "InvalidSpec",
            "no JobSet: the spec is invalid",
            now,
            generation,
        ),
        cond.make_condition(FAILED_CONDITION, "True", "InvalidSpec", message, now, generation),
    ]
    status["conditions"] = cond.merge_conditions(previous.get("conditions"), desired)
    return status


def describe_spec_change(ran: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """Which top-level spec fields differ between what ran and what is asked now; None if none."""
    changed = sorted(k for k in set(ran) | set(current) if ran.get(k) != current.get(k))
    if not changed:
        return None
    return (
        f"spec fields changed after the run started: {', '.join(changed)}; the running JobSet "
        "keeps the spec it started with. Delete and re-create the benchmark to run the new spec."
    )
