"""The sweep specs: a base benchmark spec (``template``) and the settings to vary.

The cells are the cross product of ``axes`` (each a list of values of one ``template`` field) or
an explicit list ``cells`` (each a few ``template`` fields set). Each cell runs as one child
benchmark: a CheckpointBenchmarkSweep's a CheckpointBenchmark, a DataLoadingBenchmarkSweep's a
DataLoadingBenchmark. Both specs are one model, :class:`SweepSpecBase`, with the template, axes
and cells typed from the child's spec (:class:`~ckptbench.operator.sweep.cells.ChildKind`). As for
the benchmark, the CRD is generated from this model, and the rules the schema cannot express exist
twice: as CEL on the CRD and as the Python twin in the validators here.

The axis fields are the settings declared as axes (``workload/contract/settings.py`` and
``contract/data/settings.py``): a setting becomes an axis by its declaration saying so, with its
own type and bounds, because the axis and cell models are built from the child spec's own fields.
An axis of the other kind is no field of the axes model, so the schema refuses it as unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self, TypeVar, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic.alias_generators import to_camel

from ckptbench.operator.data.model import DataLoadingBenchmarkSpec
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.pods import PodSpec
from ckptbench.operator.sweep.cells import CHECKPOINT, DATA, ChildKind, expand, scalar
from ckptbench.workload.contract.cells import MAX_CELLS

MAX_PARALLELISM = 16


def _camel(fields: list[str]) -> list[str]:
    return [to_camel(f) for f in fields]


def _cell_count_cel(fields: list[str]) -> str:
    factors = [f"(has(self.{c}) ? size(self.{c}) : 1)" for c in _camel(fields)]
    return " * ".join(factors) + f" <= {MAX_CELLS}"


_CONFIG = ConfigDict(
    alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, frozen=True
)


def _axis_type(child: ChildKind, field: str) -> Any:
    info = child.model.model_fields[field]
    item = scalar(info.annotation)
    # The values keep the benchmark field's own bounds and enum (``metadata`` carries ge/le).
    return Annotated[item, *info.metadata] if info.metadata else item


def _build_axes(child: ChildKind, prefix: str) -> type[BaseModel]:
    fields = child.axis_fields()
    definitions: dict[str, Any] = {
        f: (
            list[_axis_type(child, f)] | None,  # type: ignore[misc]
            Field(
                None,
                min_length=1,
                max_length=MAX_CELLS,
                strict=False if child.is_choice(f) else None,
                description=f"Values of template.{to_camel(f)}, one cell each (crossed with "
                "the other axes); no value twice.",
                json_schema_extra={"x-kubernetes-list-type": "set"},
            ),
        )
        for f in fields
    }
    rule = {
        "rule": _cell_count_cel(fields),
        "message": f"axes: the cross product of the axes must be at most {MAX_CELLS} cells",
    }
    model = create_model(
        f"{prefix}SweepAxes",
        __config__=ConfigDict(
            **_CONFIG, json_schema_extra={"x-kubernetes-validations": [cast("JsonValue", rule)]}
        ),
        __doc__="Benchmark settings to vary: the cells are the cross product of these lists.",
        **definitions,
    )
    return model


def _build_cell(child: ChildKind, prefix: str) -> type[BaseModel]:
    definitions: dict[str, Any] = {
        f: (
            _axis_type(child, f) | None,
            Field(
                None,
                strict=False if child.is_choice(f) else None,
                description=f"template.{to_camel(f)} in this cell.",
            ),
        )
        for f in child.axis_fields()
    }
    return create_model(
        f"{prefix}SweepCell",
        __config__=_CONFIG,
        __doc__="One cell: the template fields it sets (the others are the template's).",
        **definitions,
    )


SweepAxes = _build_axes(CHECKPOINT, "")
SweepCell = _build_cell(CHECKPOINT, "")
DataSweepAxes = _build_axes(DATA, "Data")
DataSweepCell = _build_cell(DATA, "Data")

_SPEC_RULES: list[JsonValue] = [
    {
        "rule": "has(self.axes) != has(self.cells)",
        "message": "axes or cells: give exactly one of them",
    }
]


class SweepSpecBase(BaseModel):
    """What every sweep's spec has; each kind's model types the template, axes and cells from
    the spec of the kind its cells run as (:attr:`CHILD`)."""

    CHILD: ClassVar[ChildKind]

    model_config = ConfigDict(
        **_CONFIG, json_schema_extra={"x-kubernetes-validations": _SPEC_RULES}
    )

    template: PodSpec
    axes: BaseModel | None
    cells: list[BaseModel] | None
    parallelism: int = Field(
        1,
        ge=1,
        le=MAX_PARALLELISM,
        description="Cells run at the same time. Default 1: benchmarks that share a bucket or a "
        "node pool disturb each other's figures.",
    )
    stop_on_failure: bool = Field(
        False,
        description="Stop starting cells after a cell fails. Default: a failed cell is recorded "
        "and the sweep goes on.",
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        # The Python twins of the CEL rules, and what CEL cannot see: every cell's whole spec.
        if (self.axes is None) == (self.cells is None):
            raise ValueError("axes or cells: give exactly one of them")
        expand(self)  # every cell's spec must be valid on its own
        return self


_AXES = "Settings to vary: the cells are the cross product of these lists."
_CELLS = "An explicit list of cells instead of axes: each sets some template fields."


class CheckpointBenchmarkSweepSpec(SweepSpecBase):
    """A grid of CheckpointBenchmarks: the template's settings with some varied, one child
    CheckpointBenchmark per cell, run one at a time (or up to parallelism), compared in .status."""

    CHILD: ClassVar[ChildKind] = CHECKPOINT

    template: CheckpointBenchmarkSpec = Field(
        description="The benchmark spec every cell starts from (a CheckpointBenchmark spec)."
    )
    axes: SweepAxes | None = Field(None, description=_AXES)  # type: ignore[valid-type]
    cells: list[SweepCell] | None = Field(  # type: ignore[valid-type]
        None, min_length=1, max_length=MAX_CELLS, description=_CELLS
    )


class DataLoadingBenchmarkSweepSpec(SweepSpecBase):
    """A grid of DataLoadingBenchmarks: the template's settings with some varied, one child
    DataLoadingBenchmark per cell, run one at a time (or up to parallelism), compared in
    .status."""

    CHILD: ClassVar[ChildKind] = DATA

    template: DataLoadingBenchmarkSpec = Field(
        description="The benchmark spec every cell starts from (a DataLoadingBenchmark spec)."
    )
    axes: DataSweepAxes | None = Field(None, description=_AXES)  # type: ignore[valid-type]
    cells: list[DataSweepCell] | None = Field(  # type: ignore[valid-type]
        None, min_length=1, max_length=MAX_CELLS, description=_CELLS
    )


_S = TypeVar("_S", bound=SweepSpecBase)


def parse_sweep(raw: object) -> CheckpointBenchmarkSweepSpec:
    """Validate a CheckpointBenchmarkSweep's spec; a :class:`CellError` or ValueError names each
    bad field."""
    return parse_sweep_of(CheckpointBenchmarkSweepSpec, raw)


def parse_sweep_of(model: type[_S], raw: object) -> _S:
    """Validate a sweep's spec as ``model``; a :class:`CellError` or ValueError names each bad
    field."""
    if isinstance(raw, Mapping) and not isinstance(raw, dict):
        raw = dict(raw)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for e in exc.errors():
            path = "spec" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"])
            message = str(e["msg"]).removeprefix("Value error, ")
            problems.append(f"{path}: {message}" if e["loc"] else f"spec.{message}")
        raise ValueError("; ".join(problems)) from None
