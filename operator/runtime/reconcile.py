"""One reconcile of a benchmark, and the reconciler that runs it on events and resyncs.

Both kinds of benchmark (CheckpointBenchmark, DataLoadingBenchmark) reconcile alike; what differs
is a :class:`Kind`: how its spec is parsed, its JobSet rendered, its status computed and its
series set. A reconcile reads the benchmark, makes sure its JobSet exists (creating it at most
once: an existing one, 409 AlreadyExists, counts as done), reads the JobSet's pods (from the
operator's watch-fed pod index: no list call, see :class:`Reconciler`), computes the status
with the pure :func:`~ckptbench.operator.status.compute.compute_status`, and patches it only when
it changed.
The spec the JobSet was rendered from is kept in an annotation on the JobSet: a later edit of the
spec is refused with a condition, never re-rendered.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from ckptbench.operator.data.status_schema import DataLoadingStatus
from ckptbench.operator.render.jobset import RenderDefaults, RenderError, render_jobset, spec_hash
from ckptbench.operator.render.labels import SPEC_HASH_ANNOTATION
from ckptbench.operator.runtime import metrics
from ckptbench.operator.runtime.coalesce import Coalescing, Key
from ckptbench.operator.runtime.steps import patch_if_changed, read_live
from ckptbench.operator.spec import names
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec, canonical_json
from ckptbench.operator.spec.names import validate_name
from ckptbench.operator.spec.parse import SpecError, parse_spec
from ckptbench.operator.spec.policy import Policy
from ckptbench.operator.spec.status_schema import BenchmarkStatus, status_body
from ckptbench.operator.status import compute as st
from ckptbench.operator.status.conditions import timestamp
from ckptbench.operator.status.events import Event, transitions
from ckptbench.operator.status.memo import StatusMemo
from ckptbench.operator.status.phases import with_reconcile_error
from ckptbench.operator.status.pods import excerpt

RENDERED_SPEC_ANNOTATION = "ckptbench.dev/rendered-spec"
HANDLER_RESYNC = "resync"

log = logging.getLogger(__name__)


class Api(Protocol):
    """The API calls a reconcile makes (:class:`ckptbench.operator.runtime.kube.Kube`)."""

    def get_benchmark(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any] | None: ...
    def list_pods(self, namespace: str, benchmark: str) -> list[dict[str, Any]]: ...
    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None: ...
    def post_event(
        self, benchmark: Mapping[str, Any], type_: str, reason: str, message: str, now: str
    ) -> None: ...
    def list_benchmarks(self, namespace: str | None) -> list[Key]: ...


# The pods of each benchmark by (namespace, name), kept current by the pod watch (kopf's
# ``@kopf.index``, registered in handlers): a reconcile reads them without an API call.
PodIndex = Mapping[Key, Iterable[Mapping[str, Any]]]
PodRead = Callable[[str, str], Sequence[Mapping[str, Any]]]


def index_reader(index: PodIndex) -> PodRead:
    """The pods of a benchmark as the index holds them now (none yet: an empty list)."""

    def read(namespace: str, name: str) -> list[Mapping[str, Any]]:
        return list(index.get((namespace, name), ()))

    return read


S = TypeVar("S", bound=BaseModel)  # a kind's spec model
Status = BenchmarkStatus | DataLoadingStatus  # the status of each kind the operator writes
S_in = TypeVar("S_in", bound=BaseModel, contravariant=True)


class Compute(Protocol[S_in]):
    """A kind's status: a pure function of the spec that ran, its JobSet and its pods."""

    def __call__(
        self,
        spec: S_in,
        jobset: Mapping[str, Any] | None,
        pods: Sequence[Mapping[str, Any]],
        previous: Mapping[str, Any] | None,
        now: datetime,
        *,
        generation: int | None,
        spec_change: str | None,
        foreign_jobset: str | None,
        memo: Any,
    ) -> BaseModel: ...


class Invalid(Protocol):
    """A kind's status when its spec cannot run: no JobSet is created."""

    def __call__(
        self,
        message: str,
        previous: Mapping[str, Any] | None,
        now: datetime,
        *,
        generation: int | None,
    ) -> BaseModel: ...


@dataclass(frozen=True)
class Kind(Generic[S]):
    """What a reconcile needs of one kind of benchmark; the steps are the same for every kind."""

    name: str
    parse: Callable[[object, Policy | None], S]  # raises SpecError naming the fields
    render: Callable[[str, str, str, S, RenderDefaults], dict[str, Any]]  # raises RenderError
    compute: Compute[S]
    invalid: Invalid
    backend: Callable[[S], str]  # the series' backend label
    update_metrics: Callable[[str, str, str, Mapping[str, Any]], None]
    remove_metrics: Callable[[str, str], None]
    new_memo: Callable[[], Any]  # what one benchmark's reconciles keep for the next
    handler_prefix: str = ""  # before the handler names its reconciles are counted under


def _compute_checkpoint(
    spec: CheckpointBenchmarkSpec,
    jobset: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    previous: Mapping[str, Any] | None,
    now: datetime,
    *,
    generation: int | None,
    spec_change: str | None,
    foreign_jobset: str | None,
    memo: Any,
) -> BaseModel:
    return st.compute_status(
        spec,
        jobset,
        pods,
        previous,
        now,
        generation=generation,
        spec_change=spec_change,
        foreign_jobset=foreign_jobset,
        memo=memo,
    )


CHECKPOINT: Kind[CheckpointBenchmarkSpec] = Kind(
    name=names.KIND,
    parse=parse_spec,
    render=render_jobset,
    compute=_compute_checkpoint,
    invalid=st.invalid_spec_status,
    backend=lambda spec: spec.backend.value,
    update_metrics=metrics.update_benchmark,
    remove_metrics=metrics.remove_benchmark,
    new_memo=StatusMemo,
)


@dataclass(frozen=True)
class Outcome:
    status: Status
    patched: bool
    created_jobset: bool
    events: tuple[Event, ...] = ()


def reconcile_once(
    api: Api,
    defaults: RenderDefaults,
    namespace: str,
    name: str,
    now: datetime,
    memo: Any = None,
    pods: PodRead | None = None,
    kind: Kind[Any] = CHECKPOINT,
) -> Outcome | None:
    """Bring the benchmark's JobSet and status up to date. None when the benchmark is gone.
    ``memo`` is what the benchmark's last reconcile kept for this one; ``pods`` reads its pods
    (by default a list call); ``api`` is the API as ``kind`` sees it."""
    read_pods = api.list_pods if pods is None else pods
    live = read_live(api.get_benchmark, kind.remove_metrics, namespace, name)
    if live is None:
        return None
    bench, meta, uid, previous = live.obj, live.meta, live.uid, live.status
    generation = meta.get("generation") if isinstance(meta.get("generation"), int) else None
    raw_spec = bench.get("spec") or {}

    current: BaseModel | None = None
    problem = validate_name(name)
    if problem is None:
        try:
            current = kind.parse(raw_spec, defaults.policy)
        except SpecError as exc:
            problem = str(exc)

    jobset = api.get_jobset(namespace, name)
    foreign = _foreign(jobset, name, uid)
    created = False
    if foreign is not None:
        jobset = None
    elif jobset is None and current is not None:
        try:
            body = kind.render(name, namespace, uid, current, defaults)
        except RenderError as exc:
            problem = str(exc)
        else:
            body["metadata"].setdefault("annotations", {})[RENDERED_SPEC_ANNOTATION] = (
                canonical_json(current)
            )
            made = api.create_jobset(namespace, body)
            created = made is not None
            jobset = made if made is not None else api.get_jobset(namespace, name)
            # 409: another JobSet of this name appeared since the read; it may not be ours.
            foreign = _foreign(jobset, name, uid)
            if foreign is not None:
                jobset = None

    if jobset is None and problem is not None:
        status = kind.invalid(problem, previous, now, generation=generation)
        backend = str(raw_spec.get("backend", "")) if isinstance(raw_spec, Mapping) else ""
    else:
        ran, change = _ran_spec(kind, jobset, current, problem)
        if ran is None:  # unreachable: no JobSet means a valid current spec
            raise RuntimeError("no spec to compute the status from")
        status = kind.compute(
            ran,
            jobset,
            read_pods(namespace, name) if jobset is not None else [],
            previous,
            now,
            generation=generation,
            spec_change=change,
            foreign_jobset=foreign,
            memo=memo,
        )
        backend = kind.backend(ran)

    body, patched = patch_if_changed(api.patch_status, namespace, name, previous, status)
    kind.update_metrics(namespace, name, backend, body)
    if not isinstance(status, Status):  # every kind's status model
        raise TypeError(f"{kind.name}: not a status the operator writes: {type(status)}")
    events = tuple(transitions(previous, status, created_jobset=created))
    for event in events:
        try:
            api.post_event(bench, event.type, event.reason, event.message, timestamp(now))
        except Exception:
            # An event is a courtesy: the status, already patched, holds the same facts.
            log.warning("could not post event %s for %s/%s", event.reason, namespace, name)
    return Outcome(status, patched, created, events)


def report_error(api: Api, namespace: str, name: str, error: Exception, now: datetime) -> None:
    """Surface a failed reconcile as the benchmark's ReconcileError condition, if the API lets us:
    the status it could not recompute may be stale, and the condition says why."""
    try:
        bench = api.get_benchmark(namespace, name)
        if bench is None:
            return
        meta = bench.get("metadata") or {}
        generation = meta.get("generation") if isinstance(meta.get("generation"), int) else None
        previous = (bench.get("status") or {}).get("conditions")
        message = excerpt(f"{type(error).__name__}: {error}".replace("\n", " "))
        conditions = with_reconcile_error(previous, message, now, generation)
        patch = status_body(BenchmarkStatus(conditions=conditions))
        if patch["conditions"] != previous:
            api.patch_status(namespace, name, patch)
    except Exception:
        log.warning("could not report the failed reconcile of %s/%s", namespace, name)


def _foreign(jobset: Mapping[str, Any] | None, name: str, uid: str) -> str | None:
    """Why the JobSet of the benchmark's name is not the benchmark's own; None when it is (or
    there is none). Adopting a JobSet without our controller reference would report someone
    else's pods as this benchmark's results."""
    if jobset is None:
        return None
    owners = (jobset.get("metadata") or {}).get("ownerReferences") or []
    if any(o.get("uid") == uid and o.get("controller") for o in owners):
        return None
    controller = next((o for o in owners if o.get("controller")), None)
    if controller is None:
        whose = "has no controller owner"
    else:
        whose = (
            f"is controlled by {controller.get('kind', '?')} {controller.get('name', '?')} "
            f"(uid {controller.get('uid', '?')})"
        )
    return (
        f"JobSet {name} already exists and {whose}: it is not adopted. The benchmark starts once "
        "it is gone (the garbage collector removes an earlier benchmark's JobSet; delete any "
        "other by hand)"
    )


def _ran_spec(
    kind: Kind[Any],
    jobset: Mapping[str, Any] | None,
    current: BaseModel | None,
    problem: str | None,
) -> tuple[BaseModel | None, str | None]:
    """The spec the JobSet runs (from its annotation) and a description of any later edit."""
    if jobset is None:
        return current, None
    annotations = (jobset.get("metadata") or {}).get("annotations") or {}
    ran: BaseModel | None = None
    ran_json: dict[str, Any] | None = None
    try:
        ran_json = json.loads(annotations.get(RENDERED_SPEC_ANNOTATION) or "null")
        ran = kind.parse(ran_json, None) if ran_json is not None else None
    except (ValueError, SpecError):
        ran, ran_json = None, None
    if problem is not None:
        message = f"the edited spec is invalid and was not applied: {problem}"
        return ran or current, message
    assert current is not None  # no problem means the current spec parsed
    if annotations.get(SPEC_HASH_ANNOTATION) in (None, spec_hash(current)):
        return ran or current, None
    if ran_json is not None:
        change = st.describe_spec_change(ran_json, json.loads(canonical_json(current)))
    else:
        change = None
    return ran or current, change or (
        "the spec changed after the run started and was not applied to the running JobSet; "
        "delete and re-create the benchmark to run the new spec"
    )


@dataclass
class Reconciler(Coalescing):
    """Runs reconciles one at a time per benchmark, and coalesces bursts of pod events into one
    (:class:`~ckptbench.operator.runtime.coalesce.Coalescing`); lists the benchmarks anew every
    ``resync_seconds``.

    ``pod_index``, set by the operator's startup handler, is where reconciles read pods; without
    one (tests, and the bench's "before") each reconcile lists them. ``leading``, when set, is
    asked before each resync: a replica that is not the leader (kopf peering paused it, so no
    watch event reaches its handlers) must not reconcile on its own clock either.
    """

    api: Api
    defaults: RenderDefaults
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    resync_seconds: float = 60.0
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    pod_index: PodIndex | None = None
    leading: Callable[[str | None], Awaitable[bool]] | None = None
    kind: Kind[Any] = CHECKPOINT  # the kind of benchmark it reconciles (``api`` is that kind's)
    # Per benchmark, what its last reconcile kept: each message is read once, not every time.
    _memos: dict[Key, Any] = field(default_factory=dict, init=False)

    async def reconcile(self, namespace: str, name: str, handler: str) -> Outcome | None:
        key = (namespace, name)
        async with self.lock(key):
            with metrics.observe_reconcile(handler):
                memo = self._memos.get(key)
                if memo is None:
                    memo = self._memos[key] = self.kind.new_memo()
                pods = None if self.pod_index is None else index_reader(self.pod_index)
                try:
                    return await asyncio.to_thread(
                        reconcile_once,
                        self.api,
                        self.defaults,
                        namespace,
                        name,
                        self.clock(),
                        memo,
                        pods,
                        self.kind,
                    )
                except Exception as exc:
                    await asyncio.to_thread(
                        report_error, self.api, namespace, name, exc, self.clock()
                    )
                    raise

    def start_resync(self) -> None:
        self.spawn(self.resync_forever())

    async def resync_forever(self) -> None:
        """Every ``resync_seconds``, list the benchmarks anew and reconcile each: a dropped watch
        event or a failed reconcile (counted in the error metric and set as the ReconcileError
        condition) leaves a status stale for one interval at most."""
        while True:
            await asyncio.sleep(self.resync_seconds)
            await self.resync_once()

    async def resync_once(self) -> None:
        for namespace in self.namespaces or (None,):
            if self.leading is not None and not await self.leading(namespace):
                continue
            try:
                keys = await asyncio.to_thread(self.api.list_benchmarks, namespace)
            except Exception:
                log.exception("resync: could not list benchmarks in %s", namespace or "all")
                continue
            for key in keys:
                self.request(*key, self.kind.handler_prefix + HANDLER_RESYNC)

    async def forget(self, namespace: str, name: str) -> None:
        """The benchmark is gone: drop its series and bookkeeping. Under the benchmark's lock, so
        a reconcile already running when the deletion arrived cannot bring the series back."""
        key = (namespace, name)
        async with self.lock(key):
            self.kind.remove_metrics(namespace, name)
            self._memos.pop(key, None)
        self._locks.pop(key, None)
