"""A sweep's cells: the cross product of its axes (or its explicit list), each a valid benchmark
spec, and the child CheckpointBenchmark that runs it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from ckptbench.operator.spec import names
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec

if TYPE_CHECKING:
    from ckptbench.operator.sweep.model import CheckpointBenchmarkSweepSpec

SWEEP_KIND = "CheckpointBenchmarkSweep"
LABEL_SWEEP = "ckptbench.dev/sweep"
LABEL_CELL = "ckptbench.dev/sweep-cell"
# Children are named <sweep>-c<cell>, cells counted from 1: the longest suffix is "-c64".
CHILD_SUFFIX_LENGTH = len("-c64")
MAX_SWEEP_NAME_LENGTH = names.MAX_NAME_LENGTH - CHILD_SUFFIX_LENGTH


@dataclass(frozen=True)
class Cell:
    """Cell ``number`` (from 1): the template fields it sets (camelCase -> JSON value), its spec."""

    number: int
    values: dict[str, Any]
    spec: CheckpointBenchmarkSpec

    @property
    def label(self) -> str:
        return " ".join(f"{k}={_text(v)}" for k, v in self.values.items()) or "template"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}={_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def expand(spec: CheckpointBenchmarkSweepSpec) -> list[Cell]:
    """The cells in order (the last axis varies fastest). Raises CellError naming the bad cell."""
    from ckptbench.operator.sweep.model import CellError, axis_fields, child_spec, manifest_value

    combos: list[dict[str, Any]] = []
    if spec.axes is not None:
        axes = cast("BaseModel", spec.axes)
        lists = [(f, getattr(axes, f)) for f in axis_fields() if getattr(axes, f) is not None]
        for values in itertools.product(*(v for _, v in lists)):
            combos.append({f: v for (f, _), v in zip(lists, values, strict=True)})
    else:
        for cell in cast("list[BaseModel]", spec.cells or []):
            combos.append({f: v for f in axis_fields() if (v := getattr(cell, f)) is not None})
    cells = []
    where = "axes" if spec.axes is not None else "cells"
    for number, values in enumerate(combos, start=1):
        shown = {to_camel(k): manifest_value(v) for k, v in values.items()}
        try:
            child = child_spec(spec.template, values)
        except CellError as exc:
            label = " ".join(f"{k}={_text(v)}" for k, v in shown.items())
            at = f"cells[{number - 1}]" if where == "cells" else f"axes (cell {number}: {label})"
            raise CellError(f"{at}: makes an invalid benchmark: {exc}") from None
        cells.append(Cell(number, shown, child))
    return cells


def child_name(sweep: str, number: int) -> str:
    return f"{sweep}-c{number}"


def sweep_owner_reference(sweep: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": names.API_VERSION,
        "kind": SWEEP_KIND,
        "name": sweep,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def render_child(sweep: str, namespace: str, uid: str, cell: Cell) -> dict[str, Any]:
    """The child CheckpointBenchmark of ``cell``, owned by the sweep: it goes with the sweep."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {
            "name": child_name(sweep, cell.number),
            "namespace": namespace,
            "labels": {LABEL_SWEEP: sweep, LABEL_CELL: str(cell.number)},
            "ownerReferences": [sweep_owner_reference(sweep, uid)],
        },
        # What the template and the cell set; the API server fills in the defaults.
        "spec": cell.spec.model_dump(mode="json", by_alias=True, exclude_unset=True),
    }
