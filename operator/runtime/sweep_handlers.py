"""kopf registrations for CheckpointBenchmarkSweeps: thin wrappers around :class:`SweepReconciler`.

- a sweep created, resumed or its spec edited: reconcile it now;
- a child CheckpointBenchmark (labelled with its sweep) changes: reconcile its sweep soon
  (coalesced), which starts the next cells and refreshes the comparison table;
- a sweep deleted: its series go and its children are deleted (the garbage collector does the
  same through their owner references).
"""

from __future__ import annotations

from typing import Any

import kopf

from ckptbench.operator.runtime.registration import Watched, deleted, on_spec_change
from ckptbench.operator.runtime.sweeps import SweepReconciler
from ckptbench.operator.spec import names
from ckptbench.operator.sweep import crd as sweep_crd
from ckptbench.operator.sweep.cells import LABEL_SWEEP

SWEEPS = Watched("sweeps", SweepReconciler, "CheckpointBenchmarkSweep is namespaced")
SWEEPS.close_on_cleanup()


@on_spec_change(sweep_crd.PLURAL)
async def sweep_changed(namespace: str | None, name: str, memo: Any, reason: str, **_: Any) -> None:
    await SWEEPS.of(memo).reconcile(SWEEPS.namespace(namespace), name, str(reason))


@kopf.on.event(names.GROUP, names.VERSION, sweep_crd.PLURAL)
async def sweep_event(
    event: kopf.RawEvent, namespace: str | None, name: str, memo: Any, **_: Any
) -> None:
    uid = deleted(event)
    if uid is not None:
        await SWEEPS.of(memo).deleted(SWEEPS.namespace(namespace), name, uid)


@kopf.on.event(names.GROUP, names.VERSION, names.PLURAL, labels={LABEL_SWEEP: kopf.PRESENT})
async def sweep_child_event(
    namespace: str | None, labels: kopf.Labels, memo: Any, **_: Any
) -> None:
    SWEEPS.of(memo).request(SWEEPS.namespace(namespace), labels[LABEL_SWEEP], "child")
