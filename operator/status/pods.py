"""What a benchmark's pods say: their results (termination messages), failures and waits.

The ranks report through their containers' termination messages (the workload's compact
:class:`RankResult` JSON). Only the pods of the JobSet's latest restart attempt count. A failed
pod and an unreadable result are recorded as the status lists them (:class:`PodFailure`,
:class:`Unreadable`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from pydantic import ValidationError

from ckptbench.operator.spec.status_schema import PodFailure, Unreadable
from ckptbench.workload.contract.results.rank import RankResult

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
EXCERPT = 200


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


class RankPod(NamedTuple):
    """A pod with what its metadata says of it, read once."""

    pod: Mapping[str, Any]
    name: str
    rank: int | None  # its completion index


def current_attempt(pods: Sequence[Mapping[str, Any]]) -> list[RankPod]:
    """Pods of the JobSet's latest restart attempt, by rank then name: a restarted JobSet's old
    pods may linger. One pass over the pods' metadata: it runs on every pod at each reconcile."""
    seen: list[tuple[int, bool, RankPod]] = []
    for pod in pods:
        meta = _meta(pod)
        labels = meta.get("labels")
        value = labels.get(RESTART_ATTEMPT, "0") if isinstance(labels, Mapping) else "0"
        attempt = int(value) if str(value).isdigit() else 0
        named = RankPod(pod, str(meta.get("name", "")), _meta_rank(meta))
        seen.append((attempt, bool(meta.get("deletionTimestamp")), named))
    if not seen:
        return []
    latest = max(a for a, _, _ in seen)
    current = [
        (p.rank if p.rank is not None else 1 << 62, p.name, i)
        for i, (a, deleting, p) in enumerate(seen)
        if a == latest and not deleting
    ]
    current.sort()
    return [seen[i][2] for _, _, i in current]


def read_pods(pods: Sequence[RankPod]) -> Reports:
    results: dict[int, RankResult] = {}
    result_pods: dict[int, str] = {}
    failures: list[PodFailure] = []
    unreadable: list[Unreadable] = []
    running = 0
    pending_reason: str | None = None
    started: list[str] = []
    finished: list[str] = []
    for pod, name, rank in pods:
        status = pod.get("status") or {}
        pod_phase = status.get("phase", "Pending")
        if isinstance(status.get("startTime"), str):
            started.append(status["startTime"])
        terminated = _terminated(status)
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
                    unreadable.append(Unreadable(pod=name, rank=rank, problem=problem))
                else:
                    if rank is not None and result.rank != rank:
                        problem = f"reported rank {result.rank} but runs as rank {rank}"
                        unreadable.append(Unreadable(pod=name, rank=rank, problem=problem))
                        result = None
            elif pod_phase == "Succeeded":
                problem = "succeeded without a termination message"
                unreadable.append(Unreadable(pod=name, rank=rank, problem=problem))
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
        error = excerpt(str(status["message"]))
    return PodFailure(
        pod=name,
        rank=rank if rank is not None else (result.rank if result else None),
        exit_code=exit_code if isinstance(exit_code, int) else None,
        reason=reason,
        error=error,
    )


def _pending_reason(pod: Mapping[str, Any], name: str) -> str | None:
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] != "ContainerCreating":
            detail = f": {excerpt(str(waiting['message']))}" if waiting.get("message") else ""
            return f"pod {name} is waiting: {waiting['reason']}{detail}"
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            detail = f": {excerpt(str(condition['message']))}" if condition.get("message") else ""
            return (
                f"pod {name} is not scheduled ({condition.get('reason', 'Unschedulable')}){detail}"
            )
    return None


def _terminated(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The terminated state of the pod's container that carries a message, else of the first."""
    first: Mapping[str, Any] | None = None
    for cs in status.get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated")
        if isinstance(terminated, Mapping):
            if terminated.get("message"):
                return terminated
            first = first or terminated
    return first


def _meta_rank(meta: Mapping[str, Any]) -> int | None:
    for source in (meta.get("annotations") or {}, meta.get("labels") or {}):
        value = source.get(COMPLETION_INDEX)
        if value is not None and str(value).isdigit():
            return int(value)
    return None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def object_name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid"
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "message"
    return excerpt(f"{where}: {first['msg']}")


def excerpt(text: str) -> str:
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"
