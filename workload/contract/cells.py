"""The cells of a sweep: every combination of the values its axes take.

One expander for every cross product of settings: both kinds of sweep, ``ckptbench run`` with
comma lists and the CheckpointBenchmarkSweep's ``axes``, and ``ckptbench sizes``' comma lists.
The sweeps cap the cells alike (``sizes``, which runs nothing, at more); all refuse a value listed
twice alike; each names the axes its own way (``--threads`` or ``axes.threads``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Cells run one after another (or a few at a time); past this a typo in a list costs hours.
MAX_CELLS = 64


class CellCountError(ValueError):
    """Too many cells, or a value listed twice; the message names the axes."""


@dataclass(frozen=True)
class Axis:
    """One varied setting: its field name, how the user named it, and its values in order."""

    field: str
    shown: str  # "--threads" or "axes.threads": what an error names
    values: tuple[Any, ...]
    texts: tuple[str, ...] | None = None  # the values as the user typed them, when known

    def text(self, index: int) -> str:
        if self.texts is not None:
            return self.texts[index]
        value = self.values[index]
        return str(getattr(value, "value", value))


def cross(
    axes: Sequence[Axis], limit: int = MAX_CELLS, holder: str = "a sweep"
) -> list[dict[str, Any]]:
    """Every combination of the axes' values (field -> value), the last axis varying fastest.

    Refuses, naming the axes, more than ``limit`` cells (what ``holder`` may hold) and a value
    listed twice.
    """
    for axis in axes:
        for i, value in enumerate(axis.values):
            if value in axis.values[:i]:
                raise CellCountError(f"{axis.shown}: {axis.text(i)!r} is listed twice")
    count = math.prod(len(a.values) for a in axes)
    if count > limit:
        each = " x ".join(f"{a.shown} {len(a.values)}" for a in axes if len(a.values) > 1)
        raise CellCountError(f"{each}: {count} cells, more than the {limit} {holder} may hold")
    fields = [a.field for a in axes]
    return [
        dict(zip(fields, combo, strict=True))
        for combo in itertools.product(*(a.values for a in axes))
    ]


def label(values: dict[str, str]) -> str:
    """A cell's name for people: each varied setting as ``name=value``, in axis order."""
    return " ".join(f"{k}={v}" for k, v in values.items())
