"""kopf registrations: thin wrappers that hand every event to the :class:`Reconciler`.

- a CheckpointBenchmark created, resumed (operator restart) or its spec edited: reconcile now;
  kopf retries a reconcile that raised, with backoff;
- a JobSet or pod carrying the benchmark label changes: reconcile its benchmark soon (coalesced);
- every pod carrying the benchmark label is kept, as the status code reads it, in the
  ``benchmark_pods`` index by (namespace, benchmark): kopf updates it from the pod watch before
  any handler runs, and holds every handler back until the pods are first listed, so a reconcile
  reads its pods without an API call and never sees a partial list after a start or a takeover;
- every ``--resync-seconds``, every benchmark listed anew is reconciled again
  (:meth:`Reconciler.resync_forever`, started here), so a missed or failed event leaves a status
  stale for one interval at most. A re-list rather than a kopf timer: timers need a finalizer on
  every benchmark, and deletion needs none otherwise;
- a benchmark deleted: its metric series go. Owner references let the garbage collector delete
  the JobSet and pods, so no finalizer holds the deletion up.

The operator never writes ``spec.suspend`` of a JobSet: Kueue owns it.
"""

from __future__ import annotations

from typing import Any

import kopf

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

# A CheckpointBenchmark's objects carry no kind label; another kind's (runtime/data/handlers.py)
# do, so a same-named DataLoadingBenchmark's pods never enter this index.
_WATCHED_LABELS: dict[str, Any] = {
    LABEL_BENCHMARK: kopf.PRESENT,
    LABEL_MANAGED_BY: MANAGED_BY,
    LABEL_KIND: kopf.ABSENT,
}
_JOBSET_GROUP, _JOBSET_VERSION = JOBSET_API_VERSION.split("/")
# Server-side label selector of the JobSet and pod watches (main puts it in kopf's settings):
# only our objects stream to the operator. The handlers' labels= filters check it again.
WATCH_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_BENCHMARK}"


BENCHMARKS = Watched("reconciler", Reconciler, "CheckpointBenchmark and its pods are namespaced")
BENCHMARKS.close_on_cleanup()


POD_INDEX = "benchmark_pods"  # the index's name: its function's, as kopf names it


@kopf.index("", "v1", "pods", labels=_WATCHED_LABELS)
def benchmark_pods(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    return {(BENCHMARKS.namespace(namespace), labels[LABEL_BENCHMARK]): kept(body)}


@kopf.on.startup()
async def start_resync(memo: Any, **kwargs: Any) -> None:
    reconciler = BENCHMARKS.of(memo)
    # kopf hands every handler each index by its function's name (typed loosely for activities).
    reconciler.pod_index = kwargs[POD_INDEX]
    reconciler.start_resync()


@on_spec_change(names.PLURAL)
async def benchmark_changed(
    namespace: str | None, name: str, memo: Any, reason: str, **_: Any
) -> None:
    await BENCHMARKS.of(memo).reconcile(BENCHMARKS.namespace(namespace), name, str(reason))


@kopf.on.event(names.GROUP, names.VERSION, names.PLURAL)
async def benchmark_event(
    event: kopf.RawEvent, namespace: str | None, name: str, memo: Any, **_: Any
) -> None:
    if deleted(event) is not None:
        await BENCHMARKS.of(memo).forget(BENCHMARKS.namespace(namespace), name)


@kopf.on.event(_JOBSET_GROUP, _JOBSET_VERSION, "jobsets", labels=_WATCHED_LABELS)
async def jobset_event(namespace: str | None, labels: kopf.Labels, memo: Any, **_: Any) -> None:
    BENCHMARKS.of(memo).request(BENCHMARKS.namespace(namespace), labels[LABEL_BENCHMARK], "jobset")


@kopf.on.event("", "v1", "pods", labels=_WATCHED_LABELS)
async def pod_event(namespace: str | None, labels: kopf.Labels, memo: Any, **_: Any) -> None:
    BENCHMARKS.of(memo).request(BENCHMARKS.namespace(namespace), labels[LABEL_BENCHMARK], "pod")
