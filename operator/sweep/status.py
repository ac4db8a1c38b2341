"""A sweep's status and its next step: pure functions of its cells and its children.

The status holds one row per cell (at most 64, each of fixed shape: settings, phase, save and load
seconds and GiB/s with the GiB/s's 95% interval, and, where the cell's benchmark has them, delete
seconds, read amplification, peak RSS, the async save's stall and the checkpoint overhead, each
read from the child's status as it computed them), the best cell for save and for load (highest
throughput among the cells that succeeded, named only where its interval lies above every other
succeeded cell's: ``intervals.best_of``; otherwise the one-line form says ``indistinguishable``
and names the cells), and progress as ``done/total``: a :class:`SweepStatus`, the typed model the
sweep CRD's status schema is generated from (``kubectl explain ckbs.status``). That is a
CheckpointBenchmarkSweep's :class:`Table`; a DataLoadingBenchmarkSweep's is in ``data_status.py``.
Phase, progress and conditions are every kind's, from its children's phases.
:func:`cells_to_start` decides which cells get their child next: in order, while fewer than
``parallelism`` children are unfinished, and none after a failure when ``stopOnFailure`` is set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar, overload

from pydantic import Field

from ckptbench.operator.spec.status_schema import (
    CONDITIONS_LIST_MAP,
    MAX_CONDITIONS,
    Condition,
    StatusModel,
)
from ckptbench.operator.status import conditions as cond
from ckptbench.operator.status.phases import COMPLETE, FAILED_CONDITION
from ckptbench.operator.sweep.cells import Cell, child_name
from ckptbench.workload.contract.checkpoint.sizes import GIB
from ckptbench.workload.contract.results import intervals
from ckptbench.workload.contract.results.summaries import Interval

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
TERMINAL = (SUCCEEDED, FAILED)
# A cell's settings are scalars; a long model name or path must not grow the status unbounded.
MAX_TEXT = 120

Children = Mapping[int, Mapping[str, Any]]  # cell number -> its child benchmark
Op = Literal["save", "load"]


class CellRow(StatusModel):
    """One cell of the grid and how its benchmark went."""

    cell: int = Field(description="The cell's number, from 1.")
    name: str = Field(description="Its CheckpointBenchmark.")
    settings: dict[str, Any] = Field(
        description="The template fields the cell sets (camelCase), strings cut to 120 characters."
    )
    phase: str = Field(description="Its benchmark's phase (Pending until it has one).")
    save_seconds: float | None = Field(None, description="Mean save seconds.")
    save_gi_bps: float | None = Field(
        None, description="Save throughput, GiB/s (4 significant digits)."
    )
    save_gi_bps_ci: Interval | None = Field(
        None, description="Its 95% interval, GiB/s; absent with one sample."
    )
    load_seconds: float | None = Field(None, description="Mean load seconds.")
    load_gi_bps: float | None = Field(
        None, description="Load throughput, GiB/s (4 significant digits)."
    )
    load_gi_bps_ci: Interval | None = Field(
        None, description="Its 95% interval, GiB/s; absent with one sample."
    )
    delete_seconds: float | None = Field(
        None, description="Mean delete seconds; absent when checkpoints are kept."
    )
    read_amplification: float | None = Field(
        None,
        description="Load: bytes read from storage over the stored bytes the load plans needed, "
        "over every rank (1.0: nothing read twice or in vain).",
    )
    peak_rss_bytes: int | None = Field(
        None, description="The largest peak resident memory of a rank's process (VmHWM)."
    )
    checkpointer_peak_rss_bytes: int | None = Field(
        None, description="saveMode process: the largest peak of a rank's checkpointer process."
    )
    stall_seconds: float | None = Field(
        None,
        description="Async save: the slowest rank's mean stall, the call until it returned "
        "(staging included when the stager copies inside the call).",
    )
    overhead: float | None = Field(
        None,
        description="trainEvery set: the checkpoint overhead per interval, the slowest rank's "
        "mean, a fraction (CheckFreq's bar: 0.035).",
    )

    def gibps(self, op: Op) -> float | None:
        return self.save_gi_bps if op == "save" else self.load_gi_bps

    def gibps_ci(self, op: Op) -> Interval | None:
        return self.save_gi_bps_ci if op == "save" else self.load_gi_bps_ci


class BestCell(StatusModel):
    """The succeeded cell with the highest throughput for one operation."""

    cell: int = Field(description="The cell's number.")
    name: str = Field(description="Its CheckpointBenchmark.")
    settings: str = Field(description="What the cell sets, as one line.")
    # Named as the status has always named it, not by the camelCase rule.
    gibps: float = Field(alias="GiBps", description="Its throughput, GiB/s.")


class SweepStatusBase(StatusModel):
    """What every sweep's status has: phase, progress, the counts, the conditions; each kind's
    model adds its rows (``cells``) and its best cell."""

    phase: str = Field(description="Pending, Running, Succeeded or Failed.")
    reason: str | None = Field(None, description="InvalidSpec when nothing could be created.")
    message: str | None = Field(None, description="Why, for a person: failed cells, a bad spec.")
    cells_total: int | None = Field(None, description="Cells in the grid.")
    cells_done: int | None = Field(None, description="Cells that succeeded or failed.")
    cells_succeeded: int | None = Field(None, description="Cells that succeeded.")
    cells_failed: int | None = Field(None, description="Cells that failed.")
    progress: str | None = Field(None, description="done/total.")
    conditions: list[Condition] | None = Field(
        None,
        description="metav1-style conditions, of the benchmark's types that a sweep has: "
        "Complete (every cell succeeded) and Failed (a cell failed, or the spec is invalid).",
        max_length=MAX_CONDITIONS,
        json_schema_extra=CONDITIONS_LIST_MAP,
    )


# One row per cell number: a map keyed by cell, as the benchmark's conditions by type.
ROWS_LIST_MAP: dict[str, Any] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["cell"],
}


class SweepStatus(SweepStatusBase):
    """Observed state, written by the operator: phase, progress, a row per cell (at most 64), the
    best cell for save and for load."""

    cells: list[CellRow] | None = Field(
        None, description="One row per cell, in cell order.", json_schema_extra=ROWS_LIST_MAP
    )
    best_save: BestCell | None = Field(
        None,
        description="The cell that saved fastest, when its 95% interval lies above every other "
        "succeeded cell's.",
    )
    best_save_cell: str | None = Field(
        None,
        description="The same, as one line: name (settings); or 'indistinguishable (names)' "
        "when intervals overlap.",
    )
    best_load: BestCell | None = Field(
        None,
        description="The cell that loaded fastest, when its 95% interval lies above every other "
        "succeeded cell's.",
    )
    best_load_cell: str | None = Field(
        None,
        description="The same, as one line: name (settings); or 'indistinguishable (names)' "
        "when intervals overlap.",
    )


def child_phase(child: Mapping[str, Any] | None) -> str:
    if child is None:
        return PENDING
    phase = (child.get("status") or {}).get("phase")
    return str(phase) if isinstance(phase, str) and phase else PENDING


def cells_to_start(
    cells: Sequence[Cell], children: Children, parallelism: int, stop_on_failure: bool
) -> list[Cell]:
    """The cells whose child should be created now, in cell order."""
    phases = {n: child_phase(c) for n, c in children.items()}
    if stop_on_failure and FAILED in phases.values():
        return []
    unfinished = sum(1 for p in phases.values() if p not in TERMINAL)
    free = max(0, parallelism - unfinished)
    return [c for c in cells if c.number not in children][:free]


def _gib(rate: object) -> float | None:
    # Four significant digits: tiny test runs and 100 GiB/s clusters both keep their figure.
    return float(f"{float(rate) / GIB:.4g}") if isinstance(rate, int | float) else None


def _op(status: Mapping[str, Any], op: Op) -> tuple[float | None, float | None, Interval | None]:
    """(mean seconds, GiB/s, its interval) of a child's save or load, when it has them."""
    raw = _figure(status, op, "throughputBytesPerSecondCi")
    ci = None
    if isinstance(raw, Mapping) and (low := _gib(raw.get("low"))) is not None:
        ci = Interval(low=low, high=_gib(raw.get("high")))
    seconds = _figure(status, op, "meanSeconds")
    return (
        float(seconds) if isinstance(seconds, int | float) else None,
        _gib(_figure(status, op, "throughputBytesPerSecond")),
        ci,
    )


def _figure(status: Mapping[str, Any], *path: str) -> Any:
    """The child's status value at ``path`` (camelCase keys), None where any step is missing."""
    value: Any = status
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _row(sweep: str, cell: Cell, child: Mapping[str, Any] | None) -> CellRow:
    status = (child or {}).get("status") or {}
    save_seconds, save_rate, save_ci = _op(status, "save")
    load_seconds, load_rate, load_ci = _op(status, "load")
    return CellRow(
        cell=cell.number,
        name=child_name(sweep, cell.number),
        settings={k: v if not isinstance(v, str) else v[:MAX_TEXT] for k, v in cell.values.items()},
        phase=child_phase(child),
        save_seconds=save_seconds,
        save_gi_bps=save_rate,
        save_gi_bps_ci=save_ci,
        load_seconds=load_seconds,
        load_gi_bps=load_rate,
        load_gi_bps_ci=load_ci,
        delete_seconds=_float(_figure(status, "delete", "meanSeconds")),
        read_amplification=_float(_figure(status, "load", "readAmplification")),
        peak_rss_bytes=_int(_figure(status, "resources", "maxPeakRssBytes")),
        checkpointer_peak_rss_bytes=_int(_figure(status, "checkpointerPeakRssBytes")),
        stall_seconds=_float(_figure(status, "save", "stall", "slowestRankSeconds")),
        overhead=_float(_figure(status, "train", "overhead")),
    )


def best(rows: Sequence[CellRow], op: Op) -> intervals.Best | None:
    """Among the succeeded rows with a throughput for ``op``: the highest, by cell number, where
    its interval lies above every other's; otherwise the cells that cannot be told apart."""
    return intervals.best_of(
        [
            (r.cell, rate, r.gibps_ci(op))
            for r in rows
            if r.phase == SUCCEEDED and (rate := r.gibps(op)) is not None
        ]
    )


def _label(cell: Cell) -> str:
    return cell.label[:MAX_TEXT]


_S = TypeVar("_S", bound=SweepStatusBase)
# A kind's comparison: the rows and the best cells of its status, from the cells and children.
Compare = Callable[[str, Sequence[Cell], Children], dict[str, Any]]


@dataclass(frozen=True)
class Table(Generic[_S]):
    """What a sweep kind compares its cells by: its status model and the function that fills in
    its rows and best cells (the one place each kind's cell figures and best rule live)."""

    status_model: type[_S]
    compare: Compare


def checkpoint_table(sweep: str, cells: Sequence[Cell], children: Children) -> dict[str, Any]:
    """A CheckpointBenchmarkSweep's rows and its best save and load cells."""
    rows = [_row(sweep, c, children.get(c.number)) for c in cells]
    by_number = {c.number: c for c in cells}
    by_row = {r.cell: r for r in rows}
    found = {op: best(rows, op) for op in ("save", "load")}
    tops = {op: _best_cell(found[op], by_row, by_number, op) for op in ("save", "load")}
    lines = {op: _one_line(tops[op], found[op], by_row) for op in ("save", "load")}
    return {
        "cells": rows,
        "best_save": tops["save"],
        "best_save_cell": lines["save"],
        "best_load": tops["load"],
        "best_load_cell": lines["load"],
    }


CHECKPOINT_TABLE = Table(SweepStatus, checkpoint_table)


@overload
def sweep_status(
    sweep: str, cells: Sequence[Cell], children: Children, stop_on_failure: bool
) -> SweepStatus: ...
@overload
def sweep_status(
    sweep: str, cells: Sequence[Cell], children: Children, stop_on_failure: bool, table: Table[_S]
) -> _S: ...
def sweep_status(
    sweep: str,
    cells: Sequence[Cell],
    children: Children,
    stop_on_failure: bool,
    table: Table[Any] = CHECKPOINT_TABLE,
) -> Any:
    """The sweep's status: its phase and progress from its children's phases, its rows and best
    cells from ``table`` (its kind's)."""
    phases = [child_phase(children.get(c.number)) for c in cells]
    total = len(cells)
    succeeded = phases.count(SUCCEEDED)
    failed = phases.count(FAILED)
    done = succeeded + failed
    running = sum(
        1 for c, p in zip(cells, phases, strict=True) if c.number in children and p not in TERMINAL
    )
    stopped = stop_on_failure and failed > 0 and running == 0
    if done == total or stopped:
        phase = SUCCEEDED if failed == 0 else FAILED
    elif children:
        phase = RUNNING
    else:
        phase = PENDING
    message = None
    if failed and done < total and stopped:
        message = f"stopped after {failed} failed cell(s) (stopOnFailure); {done}/{total} done"
    elif failed:
        message = f"{failed} of {total} cells failed"
    return table.status_model(
        phase=phase,
        message=message,
        cells_total=total,
        cells_done=done,
        cells_succeeded=succeeded,
        cells_failed=failed,
        progress=f"{done}/{total}",
        **table.compare(sweep, cells, children),
    )


def _best_cell(
    found: intervals.Best | None, rows: Mapping[int, CellRow], cells: Mapping[int, Cell], op: Op
) -> BestCell | None:
    if found is None or found.winner is None:
        return None
    row = rows[found.winner]
    rate = row.gibps(op)
    if rate is None:
        return None
    return BestCell(cell=row.cell, name=row.name, settings=_label(cells[row.cell]), GiBps=rate)


def _one_line(
    top: BestCell | None, found: intervals.Best | None, rows: Mapping[int, CellRow]
) -> str | None:
    if top is not None:
        return f"{top.name} ({top.settings})"
    if found is not None and found.tied:
        return f"indistinguishable ({', '.join(rows[n].name for n in found.tied)})"
    return None


@overload
def invalid_status(problem: str) -> SweepStatus: ...
@overload
def invalid_status(problem: str, table: Table[_S]) -> _S: ...
def invalid_status(problem: str, table: Table[Any] = CHECKPOINT_TABLE) -> Any:
    """A sweep whose spec (or a cell's) is invalid: nothing is created; the message says why."""
    return table.status_model(phase=FAILED, reason="InvalidSpec", message=problem[:2000])


def with_conditions(
    status: _S,
    previous: Mapping[str, Any] | None,
    now: datetime,
    generation: int | None,
) -> _S:
    """The status with its conditions, derived from its phase as a benchmark's are: each keeps
    its previous lastTransitionTime while its status does not change (``previous``: the status as
    read from the API)."""

    def make(type_: str, state: cond.ConditionStatus, why: str, text: str) -> Condition:
        return cond.make_condition(type_, state, why, text, now, generation)

    phase, total = status.phase, status.cells_total or 0
    if phase == SUCCEEDED:
        complete = make(
            COMPLETE, "True", "AllCellsSucceeded", f"{total} of {total} cells succeeded"
        )
    else:
        complete = make(COMPLETE, "False", phase, f"the sweep is {phase.lower()}")
    if phase == FAILED:
        why = status.reason or "CellsFailed"
        failed = make(FAILED_CONDITION, "True", why, status.message or why)
    else:
        failed = make(FAILED_CONDITION, "False", "NotFailed", "the sweep has not failed")
    merged = cond.merge_conditions((previous or {}).get("conditions"), [complete, failed])
    return status.model_copy(update={"conditions": merged})
