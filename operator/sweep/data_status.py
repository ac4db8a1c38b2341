"""A DataLoadingBenchmarkSweep's comparison: one row per cell and the best cell.

Each row copies its child DataLoadingBenchmark's typed status (``operator/data/status_schema.py``):
samples per second with its 95% interval, the accelerator utilisation (AU) with its interval, the
AU floor and its verdict, the accelerators sustained at the floor and the time to first batch.

The best cell is the succeeded cell with the highest samples per second among those that keep the
AU floor (a cell whose verdict is a fail is out; a cell without a floor, whose preset emulates no
compute, competes), named only where its interval lies above every other candidate's
(``intervals.best_of``, the checkpoint sweep's rule); otherwise the one-line form says
``indistinguishable`` and names the cells, or ``none keeps the AU floor``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from ckptbench.operator.spec.status_schema import StatusModel
from ckptbench.operator.sweep.cells import Cell, child_name
from ckptbench.operator.sweep.status import (
    MAX_TEXT,
    ROWS_LIST_MAP,
    SUCCEEDED,
    Children,
    SweepStatusBase,
    Table,
    child_phase,
)
from ckptbench.workload.contract.results import intervals
from ckptbench.workload.contract.results.summaries import Interval

NO_CELL_KEEPS_THE_FLOOR = "none keeps the AU floor"


class DataCellRow(StatusModel):
    """One cell of the grid and how its data-loading benchmark went."""

    cell: int = Field(description="The cell's number, from 1.")
    name: str = Field(description="Its DataLoadingBenchmark.")
    settings: dict[str, Any] = Field(
        description="The template fields the cell sets (camelCase), strings cut to 120 characters."
    )
    phase: str = Field(description="Its benchmark's phase (Pending until it has one).")
    samples_per_second: float | None = Field(
        None, description="Samples over the epochs' seconds (the child's samplesPerSecond)."
    )
    samples_per_second_interval: Interval | None = Field(
        None, description="Its 95% interval over the epochs; absent with one epoch."
    )
    accelerator_utilization: float | None = Field(
        None, description="AU, 0 to 1; absent without emulated compute."
    )
    accelerator_utilization_interval: Interval | None = Field(
        None, description="Its 95% interval over the accelerators."
    )
    au_floor: float | None = Field(None, description="The AU floor, when one applies.")
    au_passed: bool | None = Field(None, description="The AU is at or above the floor.")
    sustained_accelerators: int | None = Field(
        None, description="The accelerators kept at or above the AU floor."
    )
    first_batch_seconds: float | None = Field(
        None, description="Time to first batch: the longest wait for an accelerator's first."
    )


class BestDataCell(StatusModel):
    """The succeeded cell, among those that keep the AU floor, with the most samples/s."""

    cell: int = Field(description="The cell's number.")
    name: str = Field(description="Its DataLoadingBenchmark.")
    settings: str = Field(description="What the cell sets, as one line.")
    samples_per_second: float = Field(description="Its samples per second.")


class DataSweepStatus(SweepStatusBase):
    """Observed state, written by the operator: phase, progress, a row per cell (at most 64), the
    best cell by samples per second among those that keep the AU floor."""

    cells: list[DataCellRow] | None = Field(
        None, description="One row per cell, in cell order.", json_schema_extra=ROWS_LIST_MAP
    )
    best: BestDataCell | None = Field(
        None,
        description="The cell with the most samples/s among the succeeded cells that keep the AU "
        "floor, when its 95% interval lies above every other such cell's.",
    )
    best_cell: str | None = Field(
        None,
        description="The same, as one line: name (settings); 'indistinguishable (names)' when "
        "intervals overlap; 'none keeps the AU floor' when every succeeded cell fails it.",
    )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _interval(value: Any) -> Interval | None:
    if not isinstance(value, Mapping) or _number(value.get("low")) is None:
        return None
    return Interval.model_validate(dict(value))


def _row(sweep: str, cell: Cell, child: Mapping[str, Any] | None) -> DataCellRow:
    status = (child or {}).get("status") or {}
    passed = status.get("auPassed")
    sustained = status.get("sustainedAccelerators")
    return DataCellRow(
        cell=cell.number,
        name=child_name(sweep, cell.number),
        settings={k: v if not isinstance(v, str) else v[:MAX_TEXT] for k, v in cell.values.items()},
        phase=child_phase(child),
        samples_per_second=_number(status.get("samplesPerSecond")),
        samples_per_second_interval=_interval(status.get("samplesPerSecondInterval")),
        accelerator_utilization=_number(status.get("acceleratorUtilization")),
        accelerator_utilization_interval=_interval(status.get("acceleratorUtilizationInterval")),
        au_floor=_number(status.get("auFloor")),
        au_passed=passed if isinstance(passed, bool) else None,
        sustained_accelerators=sustained
        if isinstance(sustained, int) and not isinstance(sustained, bool)
        else None,
        first_batch_seconds=_number(status.get("firstBatchSeconds")),
    )


def candidates(rows: Sequence[DataCellRow]) -> list[DataCellRow]:
    """The rows the best is chosen from: succeeded, with a samples/s, not failing the AU floor."""
    return [
        r
        for r in rows
        if r.phase == SUCCEEDED and r.samples_per_second is not None and r.au_passed is not False
    ]


def best(rows: Sequence[DataCellRow]) -> intervals.Best | None:
    """The highest samples/s among :func:`candidates`, by cell number, where its interval lies
    above every other's; otherwise the cells that cannot be told apart."""
    return intervals.best_of(
        [
            (r.cell, r.samples_per_second, r.samples_per_second_interval)
            for r in candidates(rows)
            if r.samples_per_second is not None
        ]
    )


def data_table(sweep: str, cells: Sequence[Cell], children: Children) -> dict[str, Any]:
    """A DataLoadingBenchmarkSweep's rows and its best cell."""
    rows = [_row(sweep, c, children.get(c.number)) for c in cells]
    by_row = {r.cell: r for r in rows}
    by_number = {c.number: c for c in cells}
    found = best(rows)
    top = None
    if found is not None and found.winner is not None:
        row = by_row[found.winner]
        label = by_number[row.cell].label[:MAX_TEXT]
        if row.samples_per_second is not None:
            top = BestDataCell(
                cell=row.cell,
                name=row.name,
                settings=label,
                samples_per_second=row.samples_per_second,
            )
    line = None
    if top is not None:
        line = f"{top.name} ({top.settings})"
    elif found is not None and found.tied:
        line = f"indistinguishable ({', '.join(by_row[n].name for n in found.tied)})"
    elif found is None and any(r.phase == SUCCEEDED and r.au_passed is False for r in rows):
        line = NO_CELL_KEEPS_THE_FLOOR
    return {"cells": rows, "best": top, "best_cell": line}


DATA_TABLE = Table(DataSweepStatus, data_table)
