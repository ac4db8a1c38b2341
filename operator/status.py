"""A CheckpointBenchmark's status: a pure function of its spec, its JobSet and its pods.

The ranks report through their containers' termination messages (the workload's compact
:class:`RankResult` JSON); :func:`compute_status` parses them, aggregates them with the workload's
own :func:`summarize`, and derives the phase, metav1-style conditions and a failure reason a person
can act on. The result is bounded in size whatever the world size (etcd refuses objects over
~1.5 MiB): aggregates, the slowest rank and short lists of missing or failed ranks only.

Deterministic: the same inputs give the same dict, so the caller can skip a patch that changes
nothing. ``now`` only stamps a condition whose status changes, or a completion never seen before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from pydantic import ValidationError

from ckptbench.operator import conditions as cond
from ckptbench.workload.contract import sizes
from ckptbench.workload.contract.results import OpSummary, RankResult, RunSummary, summarize

PENDING = "Pending"
QUEUED = "Queued"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
PHASES = (PENDING, QUEUED, RUNNING, SUCCEEDED, FAILED)
TERMINAL_PHASES = (SUCCEEDED, FAILED)

# Condition types, in the order they appear in status.
JOBSET_CREATED = "JobSetCreated"
ADMITTED = "Admitted"
COMPLETE = "Complete"
FAILED_CONDITION = "Failed"
SPEC_CHANGE_REJECTED = "SpecChangeRejected"

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"

LISTED = 10  # bounded lists: failed pods, unreadable results, rank errors
MISSING_LISTED = 20
_EXCERPT = 200


class RunSpec(Protocol):
    """What the status needs of the benchmark's spec (CheckpointBenchmarkSpec provides it)."""

    @property
    def world_size(self) -> int: ...
    @property
    def layer_size(self) -> int: ...
    @property
    def padding_size(self) -> int: ...
    @property
    def max_restarts(self) -> int: ...
    @property
    def queue_name(self) -> str | None: ...


@dataclass(frozen=True)
class PodFailure:
    pod: str
    rank: int | None
    exit_code: int | None
    reason: str
    error: str | None


@dataclass(frozen=True)
class Unreadable:
    pod: str
    rank: int | None
    problem: str


@dataclass(frozen=True)
class Reports:
    """What the pods of the current attempt said."""

    results: list[RankResult]
    result_pods: dict[int, str]
    failures: list[PodFailure]
    unreadable: list[Unreadable]
    running: int
    pending_reason: str | None
    started: str | None
    finished: str | None


def compute_status(
    spec: RunSpec,
    jobset: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    previous: Mapping[str, Any] | None,
    now: datetime,
    *,
    generation: int | None = None,
    spec_change: str | None = None,
) -> dict[str, Any]:
    """The status for ``spec`` given its JobSet (None: not created yet) and the JobSet's pods.

    ``spec`` is the spec the JobSet was rendered from. ``spec_change`` describes an edit made
    after the run started, which is refused: it becomes the SpecChangeRejected condition.
    """
    previous = previous or {}
    total = sizes.total_bytes(spec.layer_size, spec.padding_size)
    reports = read_pods(current_attempt(pods))
    summary = summarize(reports.results, spec.world_size, total)
    jobset_conditions = _jobset_conditions(jobset)
    suspended = bool(jobset is not None and (jobset.get("spec") or {}).get("suspend"))

    failure = _failure(spec, summary, reports, jobset)
    if jobset is None:
        phase, reason, message = PENDING, "JobSetNotCreated", "the JobSet has not been created yet"
    elif failure is not None:
        phase, reason, message = FAILED, failure[0], failure[1]
    elif summary.succeeded or jobset_conditions.get("Completed") == "True":
        phase, reason = SUCCEEDED, "AllRanksSucceeded"
        message = f"{summary.ranks_reported}/{spec.world_size} ranks reported success"
        if not summary.succeeded:
            reason = "JobSetCompleted"
            message = f"the JobSet completed; {message}"
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
    status.update(_ranks(spec, summary))
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
    if summary.error_count:
        status["rankErrorCount"] = summary.error_count
        status["rankErrors"] = [
            {"rank": e.rank, "pod": reports.result_pods.get(e.rank, ""), "error": e.error}
            for e in summary.errors[:LISTED]
        ]
    if reports.failures:
        status["failedPodCount"] = len(reports.failures)
        status["failedPods"] = [_failure_dict(f) for f in reports.failures[:LISTED]]
    if reports.unreadable:
        status["unreadableResultCount"] = len(reports.unreadable)
        status["unreadableResults"] = [
            {"pod": u.pod, **({"rank": u.rank} if u.rank is not None else {}), "problem": u.problem}
            for u in reports.unreadable[:LISTED]
        ]
    start = previous.get("startTime") or reports.started
    if start:
        status["startTime"] = start
    if phase in TERMINAL_PHASES:
        status["completionTime"] = (
            (previous.get("completionTime") if previous.get("phase") in TERMINAL_PHASES else None)
            or reports.finished
            or _terminal_transition(jobset)
            or cond.timestamp(now)
        )
    status["conditions"] = _conditions(
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


# -- pods ----------------------------------------------------------------------------------------


def current_attempt(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods of the JobSet's latest restart attempt: a restarted JobSet's old pods may linger."""

    def attempt(pod: Mapping[str, Any]) -> int:
        value = _labels(pod).get(RESTART_ATTEMPT, "0")
        return int(value) if str(value).isdigit() else 0

    if not pods:
        return []
    latest = max(attempt(p) for p in pods)
    return sorted(
        (p for p in pods if attempt(p) == latest and not _meta(p).get("deletionTimestamp")),
        key=lambda p: (_pod_rank(p) if _pod_rank(p) is not None else 1 << 62, _name(p)),
    )


def read_pods(pods: Sequence[Mapping[str, Any]]) -> Reports:
    results: dict[int, RankResult] = {}
    result_pods: dict[int, str] = {}
    failures: list[PodFailure] = []
    unreadable: list[Unreadable] = []
    running = 0
    pending_reason: str | None = None
    started: list[str] = []
    finished: list[str] = []
    for pod in pods:
        name = _name(pod)
        rank = _pod_rank(pod)
        status = pod.get("status") or {}
        pod_phase = status.get("phase", "Pending")
        if isinstance(status.get("startTime"), str):
            started.append(status["startTime"])
        terminated = _terminated(pod)
        result: RankResult | None = None
        if terminated is not None:
            if isinstance(terminated.get("finishedAt"), str):
                finished.append(terminated["finishedAt"])
            text = terminated.get("message")
            if text:
                try:
                    result = RankResult.from_termination_message(str(text))
                except ValidationError as exc:
                    problem = f"termination message is not a ckptbench result ({_first_error(exc)})"
                    unreadable.append(Unreadable(name, rank, problem))
                else:
                    if rank is not None and result.rank != rank:
                        problem = f"reported rank {result.rank} but runs as rank {rank}"
                        unreadable.append(Unreadable(name, rank, problem))
                        result = None
            elif pod_phase == "Succeeded":
                unreadable.append(Unreadable(name, rank, "succeeded without a termination message"))
        if result is not None:
            results[result.rank] = result
            result_pods[result.rank] = name
        if pod_phase == "Failed":
            failures.append(_pod_failure(pod, name, rank, terminated, result))
        elif pod_phase == "Running":
            running += 1
        elif pod_phase == "Pending" and pending_reason is None:
            pending_reason = _pending_reason(pod, name)
    return Reports(
        results=[results[r] for r in sorted(results)],
        result_pods=result_pods,
        failures=failures,
        unreadable=unreadable,
        running=running,
        pending_reason=pending_reason,
        started=min(started) if started else None,
        finished=max(finished) if finished else None,
    )


def _pod_failure(
    pod: Mapping[str, Any],
    name: str,
    rank: int | None,
    terminated: Mapping[str, Any] | None,
    result: RankResult | None,
) -> PodFailure:
    status = pod.get("status") or {}
    exit_code = terminated.get("exitCode") if terminated else None
    reason = str((terminated or {}).get("reason") or status.get("reason") or "Failed")
    error = result.error if result is not None else None
    if error is None and result is not None and result.verified is False:
        error = "verification failed: a loaded tensor differs from what was saved"
    if error is None and status.get("message"):
        error = _excerpt(str(status["message"]))
    return PodFailure(
        name,
        rank if rank is not None else (result.rank if result else None),
        exit_code if isinstance(exit_code, int) else None,
        reason,
        error,
    )


def _pending_reason(pod: Mapping[str, Any], name: str) -> str | None:
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] != "ContainerCreating":
            detail = f": {_excerpt(str(waiting['message']))}" if waiting.get("message") else ""
            return f"pod {name} is waiting: {waiting['reason']}{detail}"
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            detail = f": {_excerpt(str(condition['message']))}" if condition.get("message") else ""
            return (
                f"pod {name} is not scheduled ({condition.get('reason', 'Unschedulable')}){detail}"
            )
    return None


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The terminated state of the pod's container that carries a message, else of the first."""
    states: list[Mapping[str, Any]] = [
        terminated
        for cs in (pod.get("status") or {}).get("containerStatuses") or []
        if isinstance(terminated := (cs.get("state") or {}).get("terminated"), Mapping)
    ]
    with_message = [s for s in states if s.get("message")]
    if with_message:
        return with_message[0]
    return states[0] if states else None


def _pod_rank(pod: Mapping[str, Any]) -> int | None:
    meta = _meta(pod)
    for source in (meta.get("annotations") or {}, meta.get("labels") or {}):
        value = source.get(COMPLETION_INDEX)
        if value is not None and str(value).isdigit():
            return int(value)
    return None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid"
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "message"
    return _excerpt(f"{where}: {first['msg']}")


def _excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 1] + "…"


# -- aggregates ----------------------------------------------------------------------------------


def _ranks(spec: RunSpec, summary: RunSummary) -> dict[str, Any]:
    ranks: dict[str, Any] = {
        "ranksExpected": spec.world_size,
        "ranksReported": summary.ranks_reported,
        "ranksSummary": f"{summary.ranks_reported}/{spec.world_size}",
    }
    if summary.missing_rank_count:
        ranks["missingRankCount"] = summary.missing_rank_count
        ranks["missingRanks"] = summary.missing_ranks[:MISSING_LISTED]
    return ranks


def slowest_rank(results: Sequence[RankResult]) -> int | None:
    """The rank whose own save plus load time is the largest: the one holding the others up."""

    def own(result: RankResult) -> float:
        return sum(op.own.mean for op in (result.save, result.load) if op is not None)

    timed = [r for r in results if r.save is not None or r.load is not None]
    if not timed:
        return None
    return max(timed, key=lambda r: (own(r), -r.rank)).rank


def op_status(op: OpSummary, result_pods: Mapping[int, str]) -> dict[str, Any]:
    """One operation's summary in status form: no per-sample lists, so its size is fixed."""
    out: dict[str, Any] = {
        "samples": op.samples,
        "meanSeconds": op.mean_seconds,
        "stdevSeconds": op.stdev_seconds,
        "p50Seconds": op.p50_seconds,
        "p90Seconds": op.p90_seconds,
        "maxSeconds": op.max_seconds,
        "minSeconds": op.min_seconds,
        "throughputBytesPerSecond": round(op.throughput_bytes_per_second, 3),
        "throughput": sizes.format_bytes(op.throughput_bytes_per_second) + "/s",
        "minRankThroughputBytesPerSecond": round(op.min_rank_throughput_bytes_per_second, 3),
        "slowestRank": op.slowest_rank,
        "slowestRankSeconds": op.slowest_rank_seconds,
        "fastestRankSeconds": op.fastest_rank_seconds,
    }
    if op.slowest_rank in result_pods:
        out["slowestRankPod"] = result_pods[op.slowest_rank]
    if op.blocked_mean_seconds is not None:
        out["blockedMeanSeconds"] = op.blocked_mean_seconds
    return out


# -- phase and conditions ------------------------------------------------------------------------


def _jobset_conditions(jobset: Mapping[str, Any] | None) -> dict[str, str]:
    if jobset is None:
        return {}
    found: dict[str, str] = {}
    for c in (jobset.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and isinstance(c.get("type"), str):
            found[c["type"]] = str(c.get("status", "Unknown"))
    return found


def _terminal_transition(jobset: Mapping[str, Any] | None) -> str | None:
    for c in ((jobset or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Completed", "Failed") and c.get("status") == "True":
            value = c.get("lastTransitionTime")
            return value if isinstance(value, str) else None
    return None


def _jobset_failure_message(jobset: Mapping[str, Any] | None) -> str:
    for c in ((jobset or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Failed" and c.get("status") == "True":
            return _excerpt(f"{c.get('reason', 'Failed')}: {c.get('message', '')}".rstrip(": "))
    return "Failed"


def _failure(
    spec: RunSpec,
    summary: RunSummary,
    reports: Reports,
    jobset: Mapping[str, Any] | None,
) -> tuple[str, str] | None:
    """(reason, message) when the run has failed, naming the first failed rank and why."""
    jobset_failed = _jobset_conditions(jobset).get("Failed") == "True"
    # With restarts left, JobSet recreates every rank after a failure: not final yet.
    pod_failure_is_final = spec.max_restarts == 0 or jobset_failed
    if reports.failures and pod_failure_is_final:
        first = reports.failures[0]
        reason, hint = _classify(first)
        code = f" with exit code {first.exit_code}" if first.exit_code is not None else ""
        rank = f"rank {first.rank} " if first.rank is not None else ""
        others = len(reports.failures) - 1
        more = f" ({others} more pods failed)" if others else ""
        why = f": {first.error}" if first.error else f" ({first.reason})"
        return reason, f"{rank}pod {first.pod} failed{code}{why}{more}. {hint}".strip()
    if jobset_failed:
        return "JobSetFailed", f"the JobSet failed: {_jobset_failure_message(jobset)}"
    if summary.verified is False:
        bad = [e.rank for e in summary.errors]
        return "VerificationFailed", (
            "a loaded checkpoint differs from what was saved"
            + (f" (ranks {', '.join(map(str, bad))})" if bad else "")
            + ". Check the storage backend's integrity and retry."
        )
    if summary.error_count and summary.ranks_reported == spec.world_size:
        first_error = summary.errors[0]
        return "RankError", f"rank {first_error.rank} reported: {first_error.error}"
    return None


def _classify(failure: PodFailure) -> tuple[str, str]:
    error = (failure.error or "").lower()
    if failure.reason == "OOMKilled":
        return "OutOfMemory", (
            "The rank ran out of memory: a rank holds its whole shard in memory; raise "
            "resources.limits.memory or use a smaller layerSize/paddingSize."
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


def _failure_dict(failure: PodFailure) -> dict[str, Any]:
    out: dict[str, Any] = {"pod": failure.pod, "reason": failure.reason}
    if failure.rank is not None:
        out["rank"] = failure.rank
    if failure.exit_code is not None:
        out["exitCode"] = failure.exit_code
    if failure.error:
        out["error"] = _excerpt(failure.error)
    return out


def _conditions(
    spec: RunSpec,
    jobset: Mapping[str, Any] | None,
    phase: str,
    reason: str,
    message: str,
    suspended: bool,
    previous: Mapping[str, Any],
    now: datetime,
    generation: int | None,
    spec_change: str | None,
) -> list[cond.Condition]:
    def make(type_: str, status: cond.ConditionStatus, why: str, text: str) -> cond.Condition:
        return cond.make_condition(type_, status, why, text, now, generation)

    name = _name(jobset) if jobset is not None else ""
    desired = [
        make(JOBSET_CREATED, "True", "JobSetCreated", f"JobSet {name} exists")
        if jobset is not None
        else make(JOBSET_CREATED, "False", "JobSetNotCreated", "the JobSet has not been created")
    ]
    if jobset is None:
        desired.append(make(ADMITTED, "Unknown", "JobSetNotCreated", "no JobSet yet"))
    elif suspended:
        desired.append(make(ADMITTED, "False", "WaitingForAdmission", message))
    else:
        via = (
            f"admitted by Kueue to LocalQueue {spec.queue_name}"
            if spec.queue_name
            else "not queued"
        )
        desired.append(make(ADMITTED, "True", "Admitted", f"the JobSet runs ({via})"))
    if phase == SUCCEEDED:
        desired.append(make(COMPLETE, "True", reason, message))
    else:
        desired.append(make(COMPLETE, "False", phase, f"the benchmark is {phase.lower()}"))
    if phase == FAILED:
        desired.append(make(FAILED_CONDITION, "True", reason, message))
    else:
        desired.append(make(FAILED_CONDITION, "False", "NotFailed", "no rank has failed"))
    had_rejection = cond.find_condition(previous.get("conditions") or (), SPEC_CHANGE_REJECTED)
    if spec_change is not None:
        desired.append(make(SPEC_CHANGE_REJECTED, "True", "SpecImmutable", spec_change))
    elif had_rejection is not None:
        desired.append(
            make(
                SPEC_CHANGE_REJECTED, "False", "SpecMatches", "the spec matches the running JobSet"
            )
        )
    return cond.merge_conditions(previous.get("conditions"), desired)
