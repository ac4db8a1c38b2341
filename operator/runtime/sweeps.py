"""One reconcile of a sweep of either kind: validate, start the next cells, aggregate.

The sweep's children (CheckpointBenchmarks for a CheckpointBenchmarkSweep, DataLoadingBenchmarks
for a DataLoadingBenchmarkSweep: its :class:`~ckptbench.operator.sweep.kinds.SweepKind`) are named
``<sweep>-c<cell>``, labelled with the sweep and owned by it (so the garbage collector deletes
them with it). A reconcile lists them, creates
the children :func:`~ckptbench.operator.sweep.status.cells_to_start` names (an existing one, 409,
counts as created), and patches the status when it changed. A child of the same name owned by
something else is left alone and its cell reported as blocked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from ckptbench.operator.runtime import metrics
from ckptbench.operator.runtime.coalesce import Coalescing
from ckptbench.operator.runtime.steps import patch_if_changed, read_live
from ckptbench.operator.spec.policy import Policy
from ckptbench.operator.sweep import status as sst
from ckptbench.operator.sweep.cells import LABEL_CELL, Cell, CellError, expand, render_child
from ckptbench.operator.sweep.crd import validate_sweep_name
from ckptbench.operator.sweep.kinds import CHECKPOINT_SWEEP, SweepKind
from ckptbench.operator.sweep.model import SweepSpecBase, parse_sweep_of

log = logging.getLogger(__name__)


class SweepApi(Protocol):
    """The API of one sweep kind: its sweeps, and its children in the child kind's plural."""

    def get_sweep(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def list_sweep_children(self, namespace: str, sweep: str) -> list[dict[str, Any]]: ...
    def create_benchmark(
        self, namespace: str, body: Mapping[str, Any]
    ) -> dict[str, Any] | None: ...
    def delete_benchmark(self, namespace: str, name: str) -> None: ...
    def patch_sweep_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None: ...


@dataclass(frozen=True)
class SweepOutcome:
    status: sst.SweepStatusBase
    created: list[str]


def _owned(child: Mapping[str, Any], uid: str) -> bool:
    owners = (child.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("uid") == uid and o.get("controller") for o in owners)


def _children(
    api: SweepApi, namespace: str, name: str, uid: str, cells: list[Cell]
) -> dict[int, dict[str, Any]]:
    found: dict[int, dict[str, Any]] = {}
    numbers = {c.number for c in cells}
    for child in api.list_sweep_children(namespace, name):
        labels = (child.get("metadata") or {}).get("labels") or {}
        try:
            number = int(labels.get(LABEL_CELL, ""))
        except ValueError:
            continue
        if number in numbers and _owned(child, uid):
            found[number] = child
    return found


def _remove_series(kind: SweepKind) -> Callable[[str, str], None]:
    # The sweep series are the CheckpointBenchmarkSweep's (save and load throughput by cell); a
    # same-named DataLoadingBenchmarkSweep must not touch them.
    return metrics.remove_sweep if kind is CHECKPOINT_SWEEP else lambda namespace, name: None


def reconcile_sweep_once(
    api: SweepApi,
    namespace: str,
    name: str,
    policy: Policy | None = None,
    now: datetime | None = None,
    kind: SweepKind = CHECKPOINT_SWEEP,
) -> SweepOutcome | None:
    live = read_live(api.get_sweep, _remove_series(kind), namespace, name)
    if live is None:
        return None
    sweep, uid, previous = live.obj, live.uid, live.status
    problem = validate_sweep_name(name)
    spec: SweepSpecBase | None = None
    cells: list[Cell] = []
    if problem is None:
        try:
            spec = parse_sweep_of(kind.spec_model, sweep.get("spec") or {})
            cells = expand(spec)
        except (ValueError, CellError) as exc:
            problem = str(exc)
    if spec is not None and problem is None and policy is not None:
        # The admin's allow-lists, before any child exists: a child the policy refuses would be
        # refused anyway (by the API server or by the benchmark reconcile), one by one.
        refused = policy.problems(spec.template)
        if refused:
            problem = "; ".join(p.replace("spec.", "spec.template.", 1) for p in refused)
    created: list[str] = []
    status: sst.SweepStatusBase
    if spec is None or problem is not None:
        status = sst.invalid_status(problem or "invalid spec", kind.table)
    else:
        children = _children(api, namespace, name, uid, cells)
        for cell in sst.cells_to_start(cells, children, spec.parallelism, spec.stop_on_failure):
            body = render_child(name, namespace, uid, cell)
            made = api.create_benchmark(namespace, body)
            created.append(body["metadata"]["name"])
            if made is not None:
                children[cell.number] = made
        status = sst.sweep_status(name, cells, children, spec.stop_on_failure, kind.table)
    generation = (sweep.get("metadata") or {}).get("generation")
    status = sst.with_conditions(
        status,
        previous,
        now or datetime.now(UTC),
        generation if isinstance(generation, int) else None,
    )
    body, _ = patch_if_changed(api.patch_sweep_status, namespace, name, previous, status)
    if kind is CHECKPOINT_SWEEP:
        metrics.update_sweep(namespace, name, body)
    return SweepOutcome(status, created)


def delete_children(api: SweepApi, namespace: str, name: str, uid: str) -> list[str]:
    """Delete the children the sweep owned. The garbage collector does this on a real cluster
    (owner references); doing it too when the sweep's deletion is seen means a cluster without
    one (or an operator restarted mid-way) leaves no orphan benchmark running."""
    gone = []
    for child in api.list_sweep_children(namespace, name):
        if _owned(child, uid):
            child_name = str((child.get("metadata") or {}).get("name", ""))
            api.delete_benchmark(namespace, child_name)
            gone.append(child_name)
    return gone


@dataclass
class SweepReconciler(Coalescing):
    """Reconciles the sweeps of one kind one at a time per sweep; a burst of child events costs
    one reconcile."""

    LOG_KIND = "sweep "

    api: SweepApi
    policy: Policy | None = None
    kind: SweepKind = CHECKPOINT_SWEEP

    async def reconcile(self, namespace: str, name: str, handler: str) -> SweepOutcome | None:
        async with self.lock((namespace, name)):
            with metrics.observe_reconcile(f"sweep-{handler}"):
                return await asyncio.to_thread(
                    reconcile_sweep_once, self.api, namespace, name, self.policy, None, self.kind
                )

    async def deleted(self, namespace: str, name: str, uid: str) -> None:
        _remove_series(self.kind)(namespace, name)
        self._locks.pop((namespace, name), None)
        gone = await asyncio.to_thread(delete_children, self.api, namespace, name, uid)
        if gone:
            log.info("sweep %s/%s deleted: deleted its children %s", namespace, name, gone)
