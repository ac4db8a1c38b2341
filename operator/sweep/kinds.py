"""The two sweep kinds, each one bundle of what differs: its names, the kind its cells run as, its
spec model, its comparison (rows and best cell) and its printer columns.

A CheckpointBenchmarkSweep (``ckbs``) runs CheckpointBenchmarks; a DataLoadingBenchmarkSweep
(``dlbs``) runs DataLoadingBenchmarks. They are sibling kinds rather than one kind with a field
naming the child: each CRD's template, axes and cells are then typed by the API server from the
child's own schema (a union of both specs is no structural schema), ``kubectl explain`` shows
each, and each status has its own columns (save and load GiB/s; samples/s under the AU floor).
Everything else (expanding, children, phases, conditions, the reconcile) is one code path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ckptbench.operator.sweep.cells import CHECKPOINT, DATA, ChildKind
from ckptbench.operator.sweep.data_status import DATA_TABLE
from ckptbench.operator.sweep.model import (
    CheckpointBenchmarkSweepSpec,
    DataLoadingBenchmarkSweepSpec,
    SweepSpecBase,
)
from ckptbench.operator.sweep.status import CHECKPOINT_TABLE, Table


@dataclass(frozen=True)
class SweepKind:
    """One sweep kind: its resource names, its child, its spec model and its comparison."""

    plural: str
    singular: str
    short_name: str
    child: ChildKind
    spec_model: type[SweepSpecBase]
    table: Table[Any]
    printer_columns: tuple[dict[str, Any], ...]
    # The `ckptbench crd --kind` word that prints its CRD.
    crd_word: str

    @property
    def kind(self) -> str:
        return self.child.sweep_kind


_PROGRESS: tuple[dict[str, Any], ...] = (
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {
        "name": "Progress",
        "type": "string",
        "jsonPath": ".status.progress",
        "description": "Cells finished (succeeded or failed) / cells in all",
    },
)
_TAIL: tuple[dict[str, Any], ...] = (
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Failed", "type": "integer", "jsonPath": ".status.cellsFailed", "priority": 1},
)

CHECKPOINT_SWEEP = SweepKind(
    plural="checkpointbenchmarksweeps",
    singular="checkpointbenchmarksweep",
    short_name="ckbs",
    child=CHECKPOINT,
    spec_model=CheckpointBenchmarkSweepSpec,
    table=CHECKPOINT_TABLE,
    printer_columns=(
        *_PROGRESS,
        {
            "name": "Best Save",
            "type": "string",
            "jsonPath": ".status.bestSaveCell",
            "description": "The succeeded cell with the highest save throughput",
        },
        {
            "name": "Best Load",
            "type": "string",
            "jsonPath": ".status.bestLoadCell",
            "description": "The succeeded cell with the highest load throughput",
        },
        *_TAIL,
    ),
    crd_word="sweep",
)

DATA_SWEEP = SweepKind(
    plural="dataloadingbenchmarksweeps",
    singular="dataloadingbenchmarksweep",
    short_name="dlbs",
    child=DATA,
    spec_model=DataLoadingBenchmarkSweepSpec,
    table=DATA_TABLE,
    printer_columns=(
        *_PROGRESS,
        {
            "name": "Best",
            "type": "string",
            "jsonPath": ".status.bestCell",
            "description": "The succeeded cell with the most samples/s among those that keep "
            "the AU floor",
        },
        *_TAIL,
    ),
    crd_word="data-sweep",
)

SWEEP_KINDS: tuple[SweepKind, ...] = (CHECKPOINT_SWEEP, DATA_SWEEP)


def sweep_kind_of(kind: object) -> SweepKind | None:
    """The sweep kind named ``kind`` (a manifest's ``kind``), None for any other."""
    return next((k for k in SWEEP_KINDS if k.kind == kind), None)
