"""A sweep's cells: the cross product of its axes (or its explicit list), each a valid benchmark
spec, and the child benchmark that runs it.

Both sweep kinds are expanded here: a :class:`ChildKind` says what differs, the kind the cells run
as (a CheckpointBenchmark's or a DataLoadingBenchmark's spec model and plural) and the settings
its declarations make axes (``contract/settings.py``, ``contract/data/settings.py``)."""

from __future__ import annotations

import enum
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, cast

from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

from ckptbench.operator.data import names as data_names
from ckptbench.operator.data.model import DataLoadingBenchmarkSpec
from ckptbench.operator.spec import names
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.pods import PodSpec
from ckptbench.workload.contract import cells as contract_cells
from ckptbench.workload.contract import settings
from ckptbench.workload.contract.data import settings as data_settings


@dataclass(frozen=True)
class ChildKind:
    """The kind a sweep's cells run as: the sweep's kind, the child's kind, plural and spec
    model, and the child's settings declared as axes (a setting becomes an axis by its
    declaration saying so)."""

    sweep_kind: str
    kind: str
    plural: str
    model: type[PodSpec]
    axis_names: tuple[str, ...]

    def axis_fields(self) -> list[str]:
        """The spec's fields among :attr:`axis_names` that a list of values can vary."""
        fields = self.model.model_fields
        return [
            f for f in self.axis_names if f in fields and scalar(fields[f].annotation) is not None
        ]

    def is_choice(self, field: str) -> bool:
        """An enum axis takes the values as a manifest holds them: plain strings."""
        item = scalar(self.model.model_fields[field].annotation)
        return isinstance(item, type) and issubclass(item, enum.Enum)


SWEEP_KIND = "CheckpointBenchmarkSweep"
DATA_SWEEP_KIND = "DataLoadingBenchmarkSweep"

CHECKPOINT = ChildKind(
    SWEEP_KIND, names.KIND, names.PLURAL, CheckpointBenchmarkSpec, tuple(settings.axis_names())
)
DATA = ChildKind(
    DATA_SWEEP_KIND,
    data_names.KIND,
    data_names.PLURAL,
    DataLoadingBenchmarkSpec,
    tuple(d.name for d in data_settings.declared() if d.setting.axis),
)


class SweepSpec(Protocol):
    """What expanding needs of a sweep's spec (its model imports this module)."""

    CHILD: ClassVar[ChildKind]

    @property
    def template(self) -> PodSpec: ...
    @property
    def axes(self) -> Any: ...
    @property
    def cells(self) -> Any: ...


LABEL_SWEEP = "ckptbench.dev/sweep"
LABEL_CELL = "ckptbench.dev/sweep-cell"
# Children are named <sweep>-c<cell>, cells counted from 1: the longest suffix is "-c64".
CHILD_SUFFIX_LENGTH = len("-c64")
MAX_SWEEP_NAME_LENGTH = names.MAX_NAME_LENGTH - CHILD_SUFFIX_LENGTH


def scalar(annotation: Any) -> Any | None:
    """The annotation without ``| None`` when a list can hold it (a scalar); None for anything
    else (lists, maps, objects)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if args and isinstance(annotation, types.UnionType | type(typing.Optional[int])):  # noqa: UP045
        if len(args) != 1:
            return None
        annotation = args[0]
    if typing.get_origin(annotation) is typing.Literal:
        return annotation
    scalars = bool | int | float | str | enum.Enum
    if isinstance(annotation, type) and issubclass(annotation, scalars):
        return annotation
    return None


def axis_fields() -> list[str]:
    """The CheckpointBenchmark settings a CheckpointBenchmarkSweep may vary."""
    return CHECKPOINT.axis_fields()


class CellError(ValueError):
    """A cell's settings make an invalid benchmark spec; the message names the cell."""


def child_spec(child: ChildKind, template: PodSpec, values: dict[str, Any]) -> PodSpec:
    """The template with ``values`` (snake_case field -> value) set, validated as a whole as
    ``child``'s spec."""
    # Only what the template sets: a default (layerSize) must not clash with a cell's (model).
    raw = template.model_dump(mode="json", by_alias=True, exclude_unset=True)
    raw.update({to_camel(k): manifest_value(v) for k, v in values.items()})
    try:
        return child.model.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            ".".join(str(p) for p in e["loc"])
            + (": " if e["loc"] else "")
            + str(e["msg"]).removeprefix("Value error, ")
            for e in exc.errors()
        )
        raise CellError(problems) from None


def manifest_value(value: Any) -> Any:
    """A value as the manifest holds it: an enum member's value (axes hold scalars only)."""
    return getattr(value, "value", value)


@dataclass(frozen=True)
class Cell:
    """Cell ``number`` (from 1): the template fields it sets (camelCase -> JSON value), its spec,
    the kind its child is."""

    number: int
    values: dict[str, Any]
    spec: PodSpec
    child: ChildKind

    @property
    def label(self) -> str:
        return _label(self.values) or "template"


def _label(values: dict[str, Any]) -> str:
    """A cell's name, as a local sweep names its cells (``threads=4 backend=gcs``)."""
    return contract_cells.label({k: _text(v) for k, v in values.items()})


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def expand(spec: SweepSpec) -> list[Cell]:
    """The cells in order (the last axis varies fastest). Raises CellError naming the bad cell,
    too many cells or a value listed twice."""
    child = spec.CHILD
    combos: list[dict[str, Any]] = []
    if spec.axes is not None:
        axes = cast("BaseModel", spec.axes)
        listed = [
            contract_cells.Axis(f, f"axes.{to_camel(f)}", tuple(getattr(axes, f)))
            for f in child.axis_fields()
            if getattr(axes, f) is not None
        ]
        try:
            combos = contract_cells.cross(listed)
        except contract_cells.CellCountError as exc:
            raise CellError(str(exc)) from None
    else:
        for cell in cast("list[BaseModel]", spec.cells or []):
            fields = child.axis_fields()
            combos.append({f: v for f in fields if (v := getattr(cell, f)) is not None})
    cells = []
    where = "axes" if spec.axes is not None else "cells"
    for number, values in enumerate(combos, start=1):
        shown = {to_camel(k): manifest_value(v) for k, v in values.items()}
        try:
            made = child_spec(child, spec.template, values)
        except CellError as exc:
            label = _label(shown)
            at = f"cells[{number - 1}]" if where == "cells" else f"axes (cell {number}: {label})"
            raise CellError(f"{at}: makes an invalid benchmark: {exc}") from None
        cells.append(Cell(number, shown, made, child))
    return cells


def child_name(sweep: str, number: int) -> str:
    return f"{sweep}-c{number}"


def sweep_owner_reference(sweep: str, uid: str, kind: str = SWEEP_KIND) -> dict[str, Any]:
    return {
        "apiVersion": names.API_VERSION,
        "kind": kind,
        "name": sweep,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def render_child(sweep: str, namespace: str, uid: str, cell: Cell) -> dict[str, Any]:
    """The child benchmark of ``cell`` (of the cell's kind), owned by the sweep: it goes with the
    sweep."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": cell.child.kind,
        "metadata": {
            "name": child_name(sweep, cell.number),
            "namespace": namespace,
            "labels": {LABEL_SWEEP: sweep, LABEL_CELL: str(cell.number)},
            "ownerReferences": [sweep_owner_reference(sweep, uid, cell.child.sweep_kind)],
        },
        # What the template and the cell set; the API server fills in the defaults.
        "spec": cell.spec.model_dump(mode="json", by_alias=True, exclude_unset=True),
    }
