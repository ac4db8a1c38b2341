"""The CheckpointBenchmarkSweep spec: a base benchmark spec (``template``) and the settings to vary.

The cells are the cross product of ``axes`` (each a list of values of one ``template`` field) or
an explicit list ``cells`` (each a few ``template`` fields set). Each cell runs as one child
CheckpointBenchmark. As for the benchmark, the CRD is generated from this model, and the rules the
schema cannot express exist twice: as CEL on the CRD and as the Python twin in the validators here.

The axis fields are the settings declared as axes (``workload/contract/settings.py``): a setting
becomes an axis by its declaration saying so, with its own type and bounds, because the axis and
cell models are built from the benchmark spec's own fields.
"""

from __future__ import annotations

import enum
import math
import types
import typing
from typing import Annotated, Any, Self, cast

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

from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.workload.contract import settings

# The benchmark settings a sweep may vary: those declared as axes (contract/settings.py).
AXIS_FIELDS: tuple[str, ...] = tuple(settings.axis_names())
MAX_CELLS = 64
MAX_PARALLELISM = 16


def _scalar(annotation: Any) -> Any | None:
    """The annotation without ``| None`` when a list can hold it: a scalar, or an object such as
    ``model`` (a preset with its overrides); None for anything else (lists, maps)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if args and isinstance(annotation, types.UnionType | type(typing.Optional[int])):  # noqa: UP045
        if len(args) != 1:
            return None
        annotation = args[0]
    if typing.get_origin(annotation) is typing.Literal:
        return annotation
    scalars = bool | int | float | str | enum.Enum
    if isinstance(annotation, type) and issubclass(annotation, scalars | BaseModel):
        return annotation
    return None


def _is_object(field: str) -> bool:
    item = _scalar(CheckpointBenchmarkSpec.model_fields[field].annotation)
    return isinstance(item, type) and issubclass(item, BaseModel)


def _is_choice(field: str) -> bool:
    """An enum axis takes the values as a manifest holds them: plain strings."""
    item = _scalar(CheckpointBenchmarkSpec.model_fields[field].annotation)
    return isinstance(item, type) and issubclass(item, enum.Enum)


def axis_fields() -> list[str]:
    """The benchmark spec's fields among :data:`AXIS_FIELDS` that a list of values can vary."""
    fields = CheckpointBenchmarkSpec.model_fields
    return [f for f in AXIS_FIELDS if f in fields and _scalar(fields[f].annotation) is not None]


def _camel(fields: list[str]) -> list[str]:
    return [to_camel(f) for f in fields]


def _cell_count_cel(fields: list[str]) -> str:
    factors = [f"(has(self.{c}) ? size(self.{c}) : 1)" for c in _camel(fields)]
    return " * ".join(factors) + f" <= {MAX_CELLS}"


_CONFIG = ConfigDict(
    alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, frozen=True
)


def _axis_type(field: str) -> Any:
    info = CheckpointBenchmarkSpec.model_fields[field]
    item = _scalar(info.annotation)
    # The values keep the benchmark field's own bounds and enum (``metadata`` carries ge/le).
    return Annotated[item, *info.metadata] if info.metadata else item


def _build_axes() -> type[BaseModel]:
    fields = axis_fields()
    definitions: dict[str, Any] = {
        f: (
            list[_axis_type(f)] | None,  # type: ignore[misc]
            Field(
                None,
                min_length=1,
                max_length=MAX_CELLS,
                strict=False if _is_choice(f) else None,
                description=f"Values of template.{to_camel(f)}, one cell each (crossed with "
                "the other axes); no value twice.",
                # Objects cannot form a set in a CRD; their duplicates are the twin's to refuse.
                json_schema_extra={"x-kubernetes-list-type": "atomic" if _is_object(f) else "set"},
            ),
        )
        for f in fields
    }
    rule = {
        "rule": _cell_count_cel(fields),
        "message": f"axes: the cross product of the axes must be at most {MAX_CELLS} cells",
    }
    model = create_model(
        "SweepAxes",
        __config__=ConfigDict(
            **_CONFIG, json_schema_extra={"x-kubernetes-validations": [cast("JsonValue", rule)]}
        ),
        __doc__="Benchmark settings to vary: the cells are the cross product of these lists.",
        **definitions,
    )
    return model


def _build_cell() -> type[BaseModel]:
    definitions: dict[str, Any] = {
        f: (
            _axis_type(f) | None,
            Field(
                None,
                strict=False if _is_choice(f) else None,
                description=f"template.{to_camel(f)} in this cell.",
            ),
        )
        for f in axis_fields()
    }
    return create_model(
        "SweepCell",
        __config__=_CONFIG,
        __doc__="One cell: the template fields it sets (the others are the template's).",
        **definitions,
    )


SweepAxes = _build_axes()
SweepCell = _build_cell()

_SPEC_RULES: list[JsonValue] = [
    {
        "rule": "has(self.axes) != has(self.cells)",
        "message": "axes or cells: give exactly one of them",
    }
]


class CheckpointBenchmarkSweepSpec(BaseModel):
    """A grid of CheckpointBenchmarks: the template's settings with some varied, one child
    CheckpointBenchmark per cell, run one at a time (or up to parallelism), compared in .status."""

    model_config = ConfigDict(
        **_CONFIG, json_schema_extra={"x-kubernetes-validations": _SPEC_RULES}
    )

    template: CheckpointBenchmarkSpec = Field(
        description="The benchmark spec every cell starts from (a CheckpointBenchmark spec)."
    )
    axes: SweepAxes | None = Field(  # type: ignore[valid-type]
        None, description="Settings to vary: the cells are the cross product of these lists."
    )
    cells: list[SweepCell] | None = Field(  # type: ignore[valid-type]
        None,
        min_length=1,
        max_length=MAX_CELLS,
        description="An explicit list of cells instead of axes: each sets some template fields.",
    )
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
        if self.axes is not None:
            axes = cast("BaseModel", self.axes)
            sizes = {
                to_camel(f): len(v) for f in axis_fields() if (v := getattr(axes, f)) is not None
            }
            count = math.prod(sizes.values())
            if count > MAX_CELLS:
                each = " x ".join(f"{k} {n}" for k, n in sizes.items())
                raise ValueError(
                    f"axes: {each} = {count} cells; the cross product must be at most {MAX_CELLS}"
                )
            for f in axis_fields():
                values = getattr(axes, f)
                if values is not None and len(set(map(repr, values))) != len(values):
                    raise ValueError(f"axes.{to_camel(f)}: a value is listed twice")
        from ckptbench.operator.sweep.cells import expand

        expand(self)  # every cell's spec must be valid on its own
        return self


class CellError(ValueError):
    """A cell's settings make an invalid benchmark spec; the message names the cell."""


def child_spec(
    template: CheckpointBenchmarkSpec, values: dict[str, Any]
) -> CheckpointBenchmarkSpec:
    """The template with ``values`` (snake_case field -> value) set, validated as a whole."""
    # Only what the template sets: a default (layerSize) must not clash with a cell's (model).
    raw = template.model_dump(mode="json", by_alias=True, exclude_unset=True)
    raw.update({to_camel(k): manifest_value(v) for k, v in values.items()})
    try:
        return CheckpointBenchmarkSpec.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            ".".join(str(p) for p in e["loc"])
            + (": " if e["loc"] else "")
            + str(e["msg"]).removeprefix("Value error, ")
            for e in exc.errors()
        )
        raise CellError(problems) from None


def manifest_value(value: Any) -> Any:
    """A value as the manifest holds it: an enum member's value, an object's fields."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return getattr(value, "value", value)
