"""kopf registrations for DataLoadingBenchmarks: thin wrappers that hand every event to the data
kind's :class:`~ckptbench.operator.runtime.reconcile.Reconciler`, as ``runtime/handlers.py`` does
for CheckpointBenchmarks.

- a DataLoadingBenchmark created, resumed or its spec edited: reconcile now;
- a JobSet or pod carrying the benchmark label and the data kind's label changes: reconcile its
  benchmark soon (coalesced);
- its pods are kept in the ``data_benchmark_pods`` index by (namespace, benchmark): only pods with
  the data kind's label, as the CheckpointBenchmark's index keeps only pods without one, so a
  CheckpointBenchmark and a DataLoadingBenchmark of one name never read each other's ranks;
- every ``--resync-seconds``, every DataLoadingBenchmark is reconciled again;
- a benchmark deleted: its metric series go.

The operator never writes ``spec.suspend`` of a JobSet: Kueue owns it.
"""

from __future__ import annotations

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
from ckptbench.operator.runtime.data.kind import HANDLER_PREFIX
from ckptbench.operator.runtime.reconcile import Reconciler
from ckptbench.operator.runtime.registration import Watched, deleted, on_spec_change
from ckptbench.operator.spec import names
from ckptbench.operator.status.pods import kept

_WATCHED_LABELS: dict[str, Any] = {
    LABEL_BENCHMARK: kopf.PRESENT,
    LABEL_MANAGED_BY: MANAGED_BY,
    LABEL_KIND: data_names.KIND,
}
_JOBSET_GROUP, _JOBSET_VERSION = JOBSET_API_VERSION.split("/")

DATA_BENCHMARKS = Watched(
    "data_reconciler", Reconciler, "DataLoadingBenchmark and its pods are namespaced"
)
DATA_BENCHMARKS.close_on_cleanup()

POD_INDEX = "data_benchmark_pods"  # the index's name: its function's, as kopf names it


@kopf.index("", "v1", "pods", labels=_WATCHED_LABELS)
def data_benchmark_pods(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    return {(DATA_BENCHMARKS.namespace(namespace), labels[LABEL_BENCHMARK]): kept(body)}


@kopf.on.startup()
async def start_data_resync(memo: Any, **kwargs: Any) -> None:
    reconciler = DATA_BENCHMARKS.of(memo)
    reconciler.pod_index = kwargs[POD_INDEX]
    reconciler.start_resync()


@on_spec_change(data_names.PLURAL)
async def data_benchmark_changed(
    namespace: str | None, name: str, memo: Any, reason: str, **_: Any
) -> None:
    await DATA_BENCHMARKS.of(memo).reconcile(
        DATA_BENCHMARKS.namespace(namespace), name, HANDLER_PREFIX + str(reason)
    )


@kopf.on.event(names.GROUP, names.VERSION, data_names.PLURAL)
async def data_benchmark_event(
    event: kopf.RawEvent, namespace: str | None, name: str, memo: Any, **_: Any
) -> None:
    if deleted(event) is not None:
        await DATA_BENCHMARKS.of(memo).forget(DATA_BENCHMARKS.namespace(namespace), name)


@kopf.on.event(_JOBSET_GROUP, _JOBSET_VERSION, "jobsets", labels=_WATCHED_LABELS)
async def data_jobset_event(
    namespace: str | None, labels: kopf.Labels, memo: Any, **_: Any
) -> None:
    DATA_BENCHMARKS.of(memo).request(
        DATA_BENCHMARKS.namespace(namespace), labels[LABEL_BENCHMARK], HANDLER_PREFIX + "jobset"
    )


@kopf.on.event("", "v1", "pods", labels=_WATCHED_LABELS)
async def data_pod_event(namespace: str | None, labels: kopf.Labels, memo: Any, **_: Any) -> None:
    DATA_BENCHMARKS.of(memo).request(
        DATA_BENCHMARKS.namespace(namespace), labels[LABEL_BENCHMARK], HANDLER_PREFIX + "pod"
    )
