"""kopf registrations for both sweep kinds: thin wrappers around :class:`SweepReconciler`.

For a CheckpointBenchmarkSweep and a DataLoadingBenchmarkSweep alike (each its own reconciler in
kopf's memo, its own plural and its child kind's plural):

- a sweep created, resumed or its spec edited: reconcile it now;
- a child benchmark (labelled with its sweep) changes: reconcile its sweep soon (coalesced),
  which starts the next cells and refreshes the comparison table;
- a sweep deleted: its series go and its children are deleted (the garbage collector does the
  same through their owner references).
"""

from __future__ import annotations

from typing import Any

import kopf

from ckptbench.operator.runtime.registration import Watched, deleted, on_spec_change
from ckptbench.operator.runtime.sweeps import SweepReconciler
from ckptbench.operator.spec import names
from ckptbench.operator.sweep.cells import LABEL_SWEEP
from ckptbench.operator.sweep.kinds import CHECKPOINT_SWEEP, DATA_SWEEP, SweepKind

SWEEPS = Watched("sweeps", SweepReconciler, "CheckpointBenchmarkSweep is namespaced")
DATA_SWEEPS = Watched("data_sweeps", SweepReconciler, "DataLoadingBenchmarkSweep is namespaced")


def _register(kind: SweepKind, watched: Watched[SweepReconciler]) -> None:
    watched.close_on_cleanup()

    @on_spec_change(kind.plural)
    async def sweep_changed(
        namespace: str | None, name: str, memo: Any, reason: str, **_: Any
    ) -> None:
        await watched.of(memo).reconcile(watched.namespace(namespace), name, str(reason))

    @kopf.on.event(names.GROUP, names.VERSION, kind.plural)
    async def sweep_event(
        event: kopf.RawEvent, namespace: str | None, name: str, memo: Any, **_: Any
    ) -> None:
        uid = deleted(event)
        if uid is not None:
            await watched.of(memo).deleted(watched.namespace(namespace), name, uid)

    @kopf.on.event(
        names.GROUP, names.VERSION, kind.child.plural, labels={LABEL_SWEEP: kopf.PRESENT}
    )
    async def sweep_child_event(
        namespace: str | None, labels: kopf.Labels, memo: Any, **_: Any
    ) -> None:
        watched.of(memo).request(watched.namespace(namespace), labels[LABEL_SWEEP], "child")


_register(CHECKPOINT_SWEEP, SWEEPS)
_register(DATA_SWEEP, DATA_SWEEPS)
