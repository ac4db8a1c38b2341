"""What a benchmark's pods say: their results (termination messages), failures and waits.

The ranks report through their containers' termination messages (a CheckpointBenchmark's the
workload's compact :class:`RankResult` JSON, read by :func:`read_pods`; another kind's read by the
parser it hands :func:`read_results`). Only the pods of the JobSet's latest restart attempt
count. A failed pod and an unreadable result are recorded as the status lists them
(:class:`PodFailure`, :class:`Unreadable`).

Reading a message (JSON parsed, every number bounded) costs ~20 µs, and a terminated container's
message never changes: :class:`ReadMessages` keeps what each pod's message gave, its rank's
:class:`RankRecord` or why it is unreadable, from one reconcile to the next, so each message is
read once. It is read again when the pod's resourceVersion changes (the API server changes it
at every write of the pod), or, for a pod without one, when the message differs; what it holds
depends only on the message, so a status computed with it equals one computed without.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from pydantic import ValidationError

from ckptbench.operator.spec.status_schema import PodFailure, Unreadable
from ckptbench.workload.contract.results.rank import RankResult
from ckptbench.workload.contract.results.records import RankRecord, record_of

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
EXCERPT = 200


class Result(Protocol):
    """What this module reads of a rank's parsed result, whichever the kind of benchmark."""

    @property
    def rank(self) -> int: ...
    @property
    def error(self) -> str | None: ...


R = TypeVar("R", bound=Result)
Read = RankRecord | str  # a message's rank record, or why it is not a ckptbench result
Stamp = tuple[str, str]  # what says a pod's message is the one read: its version, or itself
# The metadata this module reads of a pod; with the pod's status, all the status code reads.
KEPT_METADATA = ("name", "labels", "annotations", "resourceVersion", "deletionTimestamp")


def kept(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What the status code reads of a pod, and nothing else: the operator's watch-fed pod index
    holds this for every rank (a pod's spec, its containers and their environment, is most of
    its size and is never read)."""
    meta = _meta(pod)
    return {
        "metadata": {key: meta[key] for key in KEPT_METADATA if key in meta},
        "status": pod.get("status") or {},
    }


class ReadMessages(Generic[R]):
    """What each pod's termination message gave, by pod name, as of the last reconcile that read
    them; kept by the operator per benchmark. Only the pods of the last read are kept, so a pod
    deleted since is forgotten."""

    def __init__(self) -> None:
        self._by_pod: dict[str, tuple[Stamp, R | str]] = {}

    def __len__(self) -> int:
        return len(self._by_pod)

    def reading(self, parse: Callable[[str], R | str]) -> _Reading[R]:
        return _Reading(self._by_pod, parse)


class _Reading(Generic[R]):
    """One reconcile's reading: messages seen before are looked up, and at the end the pods
    seen this time replace the ones kept."""

    def __init__(
        self, known: dict[str, tuple[Stamp, R | str]], parse: Callable[[str], R | str]
    ) -> None:
        self._known = known
        self._parse = parse
        self._seen: dict[str, tuple[Stamp, R | str]] = {}

    def read(self, pod: str, version: str | None, text: str) -> R | str:
        # The version, when the pod has one, rather than the message: 3 KiB a rank not kept.
        stamp = ("resourceVersion", version) if version else ("message", text)
        kept = self._known.get(pod)
        read = kept[1] if kept is not None and kept[0] == stamp else self._parse(text)
        self._seen[pod] = (stamp, read)
        return read

    def done(self) -> None:
        self._known.clear()
        self._known.update(self._seen)


def read_message(text: str) -> Read:
    """One termination message: its rank's record, or why it is not a ckptbench result."""
    try:
        return record_of(RankResult.from_termination_message(text))
    except ValidationError as exc:
        return f"termination message is not a ckptbench result ({_first_error(exc)})"


@dataclass(frozen=True)
class RankReports(Generic[R]):
    """What the pods of the current attempt said, their results of type ``R``."""

    results: list[R]
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
    version: str | None  # its resourceVersion


def current_attempt(pods: Sequence[Mapping[str, Any]]) -> list[RankPod]:
    """Pods of the JobSet's latest restart attempt, by rank then name: a restarted JobSet's old
    pods may linger. One pass over the pods' metadata: it runs on every pod at each reconcile."""
    seen: list[tuple[int, bool, RankPod]] = []
    for pod in pods:
        meta = _meta(pod)
        labels = meta.get("labels")
        # dict first: isinstance against the Mapping ABC alone costs several times more, per pod.
        value = labels.get(RESTART_ATTEMPT, "0") if isinstance(labels, (dict, Mapping)) else "0"
        attempt = 0 if value == "0" else int(value) if str(value).isdigit() else 0
        version = meta.get("resourceVersion")
        named = RankPod(
            pod, str(meta.get("name", "")), _meta_rank(meta), str(version) if version else None
        )
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


Reports = RankReports[RankRecord]  # a CheckpointBenchmark's


def read_pods(pods: Sequence[RankPod], known: ReadMessages[RankRecord] | None = None) -> Reports:
    """What ``pods`` said, each message a CheckpointBenchmark rank's :class:`RankResult`;
    ``known`` holds what earlier reads of their messages gave (and is brought up to date): without
    it, every message is read anew."""
    return read_results(pods, read_message, known)


def read_results(
    pods: Sequence[RankPod], parse: Callable[[str], R | str], known: ReadMessages[R] | None = None
) -> RankReports[R]:
    """What ``pods`` said, each termination message read by ``parse``; ``known`` as for
    :func:`read_pods`."""
    reading = (known if known is not None else ReadMessages[R]()).reading(parse)
    results: dict[int, R] = {}
    result_pods: dict[int, str] = {}
    failures: list[PodFailure] = []
    unreadable: list[Unreadable] = []
    running = 0
    pending_reason: str | None = None
    started: list[str] = []
    finished: list[str] = []
    for pod, name, rank, version in pods:
        status = pod.get("status") or {}
        pod_phase = status.get("phase", "Pending")
        if isinstance(status.get("startTime"), str):
            started.append(status["startTime"])
        terminated = _terminated(status)
        result: R | None = None
        if terminated is not None:
            if isinstance(terminated.get("finishedAt"), str):
                finished.append(terminated["finishedAt"])
            text = terminated.get("message")
            if text:
                read = reading.read(name, version, str(text))
                if isinstance(read, str):
                    unreadable.append(Unreadable(pod=name, rank=rank, problem=read))
                else:
                    result = read
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
    reading.done()
    return RankReports(
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
    result: Result | None,
) -> PodFailure:
    status = pod.get("status") or {}
    exit_code = terminated.get("exitCode") if terminated else None
    reason = str((terminated or {}).get("reason") or status.get("reason") or "Failed")
    error = result.error if result is not None else None
    # A checkpoint rank's record says whether its loads matched (a data rank's result does not).
    if error is None and getattr(result, "verified", None) is False:
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
        if isinstance(terminated, (dict, Mapping)):
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
    return meta if isinstance(meta, (dict, Mapping)) else {}


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


def against_spec(
    reports: Reports, saving_ranks: int, shard_bytes: Callable[[int], int] | None
) -> Reports:
    """``reports`` with each result that does not match the spec moved to the unreadable, by
    name: a rank that saves but reports no save (it counted as success, its save figures left
    out), or bytes other than its shard's (``shard_bytes(rank)``; None: not checked)."""
    kept: list[RankRecord] = []
    unreadable = list(reports.unreadable)
    for record in reports.results:
        problem = None
        saves = record.rank < saving_ranks
        if saves and record.error is None and record.save is None:
            problem = f"rank {record.rank} saves, but its result has no save section"
        elif saves and shard_bytes is not None and record.bytes != shard_bytes(record.rank):
            problem = (
                f"reports {record.bytes} bytes, but the spec gives rank {record.rank} "
                f"{shard_bytes(record.rank)}"
            )
        if problem is None:
            kept.append(record)
        else:
            pod = reports.result_pods.get(record.rank, "")
            unreadable.append(Unreadable(pod=pod, rank=record.rank, problem=problem))
    if len(kept) == len(reports.results):
        return reports
    return replace(reports, results=kept, unreadable=unreadable)
