"""A sweep's status and its next step: pure functions of its cells and its children.

The status holds one row per cell (at most 64, each of fixed shape: settings, phase, save and load
seconds and GiB/s), the best cell for save and for load (highest throughput among the cells that
succeeded), and progress as ``done/total``. :func:`cells_to_start` decides which cells get their
child next: in order, while fewer than ``parallelism`` children are unfinished, and none after a
failure when ``stopOnFailure`` is set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ckptbench.operator.sweep.cells import Cell, child_name
from ckptbench.workload.contract.sizes import GIB

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
TERMINAL = (SUCCEEDED, FAILED)
# A cell's settings are scalars; a long model name or path must not grow the status unbounded.
MAX_TEXT = 120

Children = Mapping[int, Mapping[str, Any]]  # cell number -> its child CheckpointBenchmark


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


def _op(child: Mapping[str, Any] | None, op: str) -> tuple[float | None, float | None]:
    """(mean seconds, GiB/s) of a child's save or load, when it has them."""
    summary = ((child or {}).get("status") or {}).get(op)
    if not isinstance(summary, Mapping):
        return None, None
    seconds = summary.get("meanSeconds")
    rate = summary.get("throughputBytesPerSecond")
    return (
        float(seconds) if isinstance(seconds, int | float) else None,
        # Four significant digits: tiny test runs and 100 GiB/s clusters both keep their figure.
        float(f"{float(rate) / GIB:.4g}") if isinstance(rate, int | float) else None,
    )


def _row(sweep: str, cell: Cell, child: Mapping[str, Any] | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "cell": cell.number,
        "name": child_name(sweep, cell.number),
        "settings": {
            k: v if not isinstance(v, str) else v[:MAX_TEXT] for k, v in cell.values.items()
        },
        "phase": child_phase(child),
    }
    for op in ("save", "load"):
        seconds, rate = _op(child, op)
        if seconds is not None:
            row[f"{op}Seconds"] = seconds
        if rate is not None:
            row[f"{op}GiBps"] = rate
    return row


def best(rows: Sequence[Mapping[str, Any]], op: str) -> Mapping[str, Any] | None:
    """The succeeded row with the highest throughput for ``op``; the lower cell number on a tie."""
    scored = [r for r in rows if r["phase"] == SUCCEEDED and f"{op}GiBps" in r]
    if not scored:
        return None
    return max(scored, key=lambda r: (r[f"{op}GiBps"], -r["cell"]))


def _label(cell: Cell) -> str:
    return cell.label[:MAX_TEXT]


def sweep_status(
    sweep: str, cells: Sequence[Cell], children: Children, stop_on_failure: bool
) -> dict[str, Any]:
    rows = [_row(sweep, c, children.get(c.number)) for c in cells]
    total = len(cells)
    succeeded = sum(1 for r in rows if r["phase"] == SUCCEEDED)
    failed = sum(1 for r in rows if r["phase"] == FAILED)
    done = succeeded + failed
    running = sum(
        1 for c in cells if c.number in children and rows[c.number - 1]["phase"] not in TERMINAL
    )
    stopped = stop_on_failure and failed > 0 and running == 0
    if done == total or stopped:
        phase = SUCCEEDED if failed == 0 else FAILED
    elif children:
        phase = RUNNING
    else:
        phase = PENDING
    status: dict[str, Any] = {
        "phase": phase,
        "cellsTotal": total,
        "cellsDone": done,
        "cellsSucceeded": succeeded,
        "cellsFailed": failed,
        "progress": f"{done}/{total}",
        "cells": rows,
    }
    if failed and done < total and stopped:
        status["message"] = (
            f"stopped after {failed} failed cell(s) (stopOnFailure); {done}/{total} done"
        )
    elif failed:
        status["message"] = f"{failed} of {total} cells failed"
    by_number = {c.number: c for c in cells}
    for op in ("save", "load"):
        top = best(rows, op)
        if top is not None:
            cell = by_number[top["cell"]]
            status[f"best{op.capitalize()}"] = {
                "cell": top["cell"],
                "name": top["name"],
                "settings": _label(cell),
                "GiBps": top[f"{op}GiBps"],
            }
            status[f"best{op.capitalize()}Cell"] = f"{top['name']} ({_label(cell)})"
    return status


def invalid_status(problem: str) -> dict[str, Any]:
    """A sweep whose spec (or a cell's) is invalid: nothing is created; the message says why."""
    return {"phase": FAILED, "reason": "InvalidSpec", "message": problem[:2000]}
