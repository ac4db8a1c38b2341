"""kopf registrations for both benchmark kinds: thin wrappers that hand every event to the kind's
:class:`Reconciler`.

For a CheckpointBenchmark and a DataLoadingBenchmark alike (each its own reconciler in kopf's
memo, its own plural, pod index and handler ids):

- a benchmark created, resumed (operator restart) or its spec edited: reconcile now;
  kopf retries a reconcile that raised, with backoff;
- a JobSet or pod carrying the benchmark label (and the kind's label) changes: reconcile its
  benchmark soon (coalesced);
- every pod carrying them is kept, as the status code reads it, in the kind's pod index by
  (namespace, benchmark): kopf updates it from the pod watch before any handler runs, and holds
  every handler back until the pods are first listed, so a reconcile reads its pods without an
  API call and never sees a partial list after a start or a takeover. A CheckpointBenchmark's
  objects carry no kind label and a DataLoadingBenchmark's carry the data kind's, so benchmarks of
  the two kinds with one name never read each other's ranks;
- every ``--resync-seconds``, every benchmark listed anew is reconciled again
  (:meth:`Reconciler.resync_forever`, started here), so a missed or failed event leaves a status
  stale for one interval at most. A re-list rather than a kopf timer: timers need a finalizer on
  every benchmark, and deletion needs none otherwise;
- a benchmark deleted: its metric series go (each kind's reconciler removes its own). Owner
  references let the garbage collector delete the JobSet and pods, so no finalizer holds the
  deletion up.

The operator never writes ``spec.suspend`` of a JobSet: Kueue owns it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kopf

from ckptbench.operator.data import names as data_names
from ckptbench.operator.render.labels import (
    JOBSET_API_VERSION,
    LABEL_BENCHMARK,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    MANAGED_BY,
)
from ckptbench.operator.runtime.reconcile import Reconciler
from ckptbench.operator.runtime.registration import Watched, deleted, on_spec_change
from ckptbench.operator.spec import names
from ckptbench.operator.status.pods import kept

_JOBSET_GROUP, _JOBSET_VERSION = JOBSET_API_VERSION.split("/")
# Server-side label selector of the JobSet and pod watches (main puts it in kopf's settings):
# only our objects stream to the operator. The handlers' labels= filters check it again.
WATCH_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_BENCHMARK}"


@dataclass(frozen=True)
class BenchmarkKind:
    """One benchmark kind as its registrations differ: the handler ids are ``id_prefix`` and the
    names the CheckpointBenchmark's handlers were released under. kopf stores a handler's
    progress under its id and hands an index to handlers under its id, so these never change."""

    plural: str
    # The kind label's filter: kopf.ABSENT (its type is not exported), as a CheckpointBenchmark's
    # objects carry no kind label, or the value the kind's objects carry.
    kind_label: Any
    watched: Watched[Reconciler]
    id_prefix: str

    @property
    def pod_index(self) -> str:
        return f"{self.id_prefix}benchmark_pods"


CHECKPOINT = BenchmarkKind(
    plural=names.PLURAL,
    kind_label=kopf.ABSENT,
    watched=Watched("reconciler", Reconciler, "CheckpointBenchmark and its pods are namespaced"),
    id_prefix="",
)
DATA = BenchmarkKind(
    plural=data_names.PLURAL,
    kind_label=data_names.KIND,
    watched=Watched(
        "data_reconciler", Reconciler, "DataLoadingBenchmark and its pods are namespaced"
    ),
    id_prefix="data_",
)


def _register(kind: BenchmarkKind) -> None:
    watched, prefix = kind.watched, kind.id_prefix
    labels: dict[str, Any] = {
        LABEL_BENCHMARK: kopf.PRESENT,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_KIND: kind.kind_label,
    }
    watched.close_on_cleanup()

    # Nested functions would get ids (and the index its name) from their qualified names, as
    # "_register.<locals>.benchmark_pods": every id is given explicitly instead.
    @kopf.index("", "v1", "pods", labels=labels, id=kind.pod_index)
    def benchmark_pods(
        namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
    ) -> dict[tuple[str, str], dict[str, Any]]:
        return {(watched.namespace(namespace), labels[LABEL_BENCHMARK]): kept(body)}

    @kopf.on.startup(id=f"start_{prefix}resync")
    async def start_resync(memo: Any, **kwargs: Any) -> None:
        reconciler = watched.of(memo)
        # kopf hands every handler each index by its id (typed loosely for activities).
        reconciler.pod_index = kwargs[kind.pod_index]
        reconciler.start_resync()

    async def benchmark_changed(
        namespace: str | None, name: str, memo: Any, reason: str, **_: Any
    ) -> None:
        reconciler = watched.of(memo)
        await reconciler.reconcile(
            watched.namespace(namespace), name, reconciler.kind.handler_prefix + str(reason)
        )

    on_spec_change(kind.plural, id=f"{prefix}benchmark_changed")(benchmark_changed)

    @kopf.on.event(names.GROUP, names.VERSION, kind.plural, id=f"{prefix}benchmark_event")
    async def benchmark_event(
        event: kopf.RawEvent, namespace: str | None, name: str, memo: Any, **_: Any
    ) -> None:
        if deleted(event) is not None:
            await watched.of(memo).forget(watched.namespace(namespace), name)

    def request(namespace: str | None, labels: kopf.Labels, memo: Any, what: str) -> None:
        reconciler = watched.of(memo)
        reconciler.request(
            watched.namespace(namespace),
            labels[LABEL_BENCHMARK],
            reconciler.kind.handler_prefix + what,
        )

    @kopf.on.event(
        _JOBSET_GROUP, _JOBSET_VERSION, "jobsets", labels=labels, id=f"{prefix}jobset_event"
    )
    async def jobset_event(namespace: str | None, labels: kopf.Labels, memo: Any, **_: Any) -> None:
        request(namespace, labels, memo, "jobset")

    @kopf.on.event("", "v1", "pods", labels=labels, id=f"{prefix}pod_event")
    async def pod_event(namespace: str | None, labels: kopf.Labels, memo: Any, **_: Any) -> None:
        request(namespace, labels, memo, "pod")


_register(CHECKPOINT)
_register(DATA)
