"""CheckpointBenchmarkSweep: the spec refused by field (model and CRD alike), its cells, the
children it renders, the status it aggregates, and the generated CRD in sync."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from ckptbench.operator.spec.crd import model_schema
from ckptbench.operator.spec.status_schema import status_body
from ckptbench.operator.sweep import cells as sc
from ckptbench.operator.sweep import crd as sweep_crd
from ckptbench.operator.sweep import status as sst
from ckptbench.operator.sweep.cells import CellError
from ckptbench.operator.sweep.model import parse_sweep
from ckptbench.workload.contract.cells import MAX_CELLS
from tests.crd_validation import cel_failures, schema_errors

ROOT = Path(__file__).resolve().parent.parent
SWEEP_CRD = sweep_crd.build_crd()
TEMPLATE = {
    "worldSize": 2,
    "layerSize": 10,
    "paddingSize": 4,
    "checkpointPath": "gs://bucket/sweep",
}


def sweep(name: str = "grid", **spec: Any) -> dict[str, Any]:
    body = {"template": copy.deepcopy(TEMPLATE), **spec}
    return {
        "apiVersion": "ckptbench.dev/v1alpha1",
        "kind": "CheckpointBenchmarkSweep",
        "metadata": {"name": name, "namespace": "default"},
        "spec": body,
    }


GRID = sweep(axes={"backend": ["gcs", "gcsfs"], "threads": [4, 16]})


def refusals(obj: dict[str, Any]) -> tuple[str, list[str]]:
    """(the model's message, the API server's: schema errors, else CEL failures)."""
    try:
        parse_sweep(obj["spec"])
        model = ""
    except (ValueError, CellError) as exc:
        model = str(exc)
    name_problem = sweep_crd.validate_sweep_name(obj["metadata"]["name"])
    if name_problem:
        model = "; ".join(p for p in (model, name_problem) if p)
    server = schema_errors(obj, SWEEP_CRD) or cel_failures(obj, SWEEP_CRD)
    return model, server


def test_a_grid_is_accepted_by_model_and_crd() -> None:
    assert refusals(GRID) == ("", [])


def test_explicit_cells_are_accepted() -> None:
    obj = sweep(cells=[{"backend": "gcsfs"}, {"threads": 32, "asyncSave": True}])
    assert refusals(obj) == ("", [])
    cells = sc.expand(parse_sweep(obj["spec"]))
    assert [c.values for c in cells] == [{"backend": "gcsfs"}, {"threads": 32, "asyncSave": True}]


THREADS_9 = list(range(1, 10))
PARTS_8 = [n * 1024 * 1024 for n in range(1, 9)]


@pytest.mark.parametrize(
    ("obj", "model_says", "server_says"),
    [
        (
            sweep(axes={"threads": [4, 0]}),
            "spec.axes.threads[1]: Input should be greater than or equal to 1",
            "spec.axes.threads.1: 0 is less than the minimum of 1",
        ),
        (
            sweep(axes={"backend": ["gcs", "azure"]}),
            "spec.axes.backend[1]: Input should be 'file', 'gcs', 'gcsfs', 's3', 's3fs' or "
            "'dataflux'",
            "spec.axes.backend.1: 'azure' is not one of",
        ),
        (
            sweep(axes={"colour": ["red"]}),
            "spec.axes.colour: Extra inputs are not permitted",
            "spec.axes: Additional properties are not allowed ('colour' was unexpected)",
        ),
        (
            sweep(axes={"threads": THREADS_9, "partSizeBytes": PARTS_8}),
            "spec.axes.threads 9 x axes.partSizeBytes 8: 72 cells, more than the 64 a sweep may "
            "hold",
            f"spec.axes: axes: the cross product of the axes must be at most {MAX_CELLS} cells",
        ),
        (
            sweep(axes={"threads": [4]}, cells=[{"threads": 8}]),
            "spec.axes or cells: give exactly one of them",
            "spec: axes or cells: give exactly one of them",
        ),
        (
            sweep(),
            "spec.axes or cells: give exactly one of them",
            "spec: axes or cells: give exactly one of them",
        ),
        (
            sweep(cells=[{"threads": 4}] * 65),
            "spec.cells: List should have at most 64 items",
            "spec.cells: [{'threads': 4},",
        ),
        (
            sweep(axes={"threads": [4]}, parallelism=17),
            "spec.parallelism: Input should be less than or equal to 16",
            "spec.parallelism: 17 is greater than the maximum of 16",
        ),
        (
            sweep("x" * (sc.MAX_SWEEP_NAME_LENGTH + 1), axes={"threads": [4]}),
            f"metadata.name: {sc.MAX_SWEEP_NAME_LENGTH + 1} characters is too long",
            f"metadata.name must be at most {sc.MAX_SWEEP_NAME_LENGTH} characters",
        ),
        (
            sweep(axes={"threads": [4]}, template={**TEMPLATE, "threads": 0}),
            "spec.template.threads: Input should be greater than or equal to 1",
            "spec.template.threads: 0 is less than the minimum of 1",
        ),
    ],
)
def test_bad_sweeps_are_refused_by_field(
    obj: dict[str, Any], model_says: str, server_says: str
) -> None:
    model, server = refusals(obj)
    assert model_says in model
    assert any(server_says in s for s in server), server


def test_a_cell_that_makes_an_invalid_benchmark_is_refused_naming_the_cell() -> None:
    # paddingSize 4 cannot feed 8 ranks: only the model sees each cell's whole spec.
    obj = sweep(axes={"worldSize": [2, 8]})
    model, _ = refusals(obj)
    assert "axes (cell 2: worldSize=8): makes an invalid benchmark" in model
    assert "paddingSize must be at least worldSize" in model


def test_duplicate_axis_values_are_refused() -> None:
    model, _ = refusals(sweep(axes={"threads": [4, 4]}))
    assert "spec.axes.threads: '4' is listed twice" in model
    # The API server refuses them too: the lists are sets.
    axes = SWEEP_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["axes"]
    kinds = {name: p["x-kubernetes-list-type"] for name, p in axes["properties"].items()}
    assert set(kinds.values()) == {"set"}


# ---------------------------------------------------------------------------------------------
# Cells and children


def test_cells_are_the_cross_product_and_children_are_valid_benchmarks() -> None:
    cells = sc.expand(parse_sweep(GRID["spec"]))
    assert [c.values for c in cells] == [
        {"backend": "gcs", "threads": 4},
        {"backend": "gcs", "threads": 16},
        {"backend": "gcsfs", "threads": 4},
        {"backend": "gcsfs", "threads": 16},
    ]
    assert cells[1].label == "backend=gcs threads=16"
    for cell in cells:
        child = sc.render_child("grid", "default", "uid-1", cell)
        assert child["metadata"]["name"] == f"grid-c{cell.number}"
        assert child["metadata"]["labels"] == {
            sc.LABEL_SWEEP: "grid",
            sc.LABEL_CELL: str(cell.number),
        }
        (owner,) = child["metadata"]["ownerReferences"]
        assert owner["kind"] == "CheckpointBenchmarkSweep" and owner["uid"] == "uid-1"
        assert owner["controller"] is True and owner["blockOwnerDeletion"] is True
        # Valid against the CheckpointBenchmark CRD, schema and CEL alike.
        assert schema_errors(child) == [] and cel_failures(child) == []
        assert child["spec"]["backend"] == cell.values["backend"]
        assert child["spec"]["threads"] == cell.values["threads"]
        assert child["spec"]["layerSize"] == TEMPLATE["layerSize"]


def test_longest_sweep_name_gives_valid_child_names() -> None:
    from ckptbench.operator.spec.names import validate_name

    name = "s" * sc.MAX_SWEEP_NAME_LENGTH
    assert validate_name(sc.child_name(name, MAX_CELLS)) is None


# ---------------------------------------------------------------------------------------------
# Status


def _cells() -> list[sc.Cell]:
    return sc.expand(parse_sweep(GRID["spec"]))


def _child(
    phase: str,
    save_gibps: float | None = None,
    load_gibps: float | None = None,
    spread: float | None = 0.01,
) -> dict[str, Any]:
    """A child's status; each throughput's interval is +/- ``spread`` of it (None: one sample)."""
    status: dict[str, Any] = {"phase": phase}
    for op, gibps in (("save", save_gibps), ("load", load_gibps)):
        if gibps is not None:
            status[op] = {"meanSeconds": 1.0 / gibps, "throughputBytesPerSecond": gibps * 1024**3}
            if spread is not None:
                status[op]["throughputBytesPerSecondCi"] = {
                    "low": gibps * (1 - spread) * 1024**3,
                    "high": gibps * (1 + spread) * 1024**3,
                }
    return {"status": status}


@pytest.mark.parametrize(
    ("children", "parallelism", "stop", "expected"),
    [
        ({}, 1, False, [1]),
        ({}, 2, False, [1, 2]),
        ({1: _child("Running")}, 1, False, []),
        ({1: _child("Succeeded")}, 1, False, [2]),
        ({1: _child("Failed")}, 1, False, [2]),  # a failure does not stop the sweep...
        ({1: _child("Failed")}, 1, True, []),  # ...unless asked
        ({1: _child("Succeeded"), 2: _child("Running")}, 3, False, [3, 4]),
        ({n: _child("Succeeded") for n in (1, 2, 3, 4)}, 1, False, []),
    ],
)
def test_cells_to_start(
    children: dict[int, Any], parallelism: int, stop: bool, expected: list[int]
) -> None:
    started = sst.cells_to_start(_cells(), children, parallelism, stop)
    assert [c.number for c in started] == expected


def test_status_tables_cells_names_the_best_and_counts_progress() -> None:
    children = {
        1: _child("Succeeded", 1.0, 3.0),
        2: _child("Succeeded", 2.0, 1.0),
        3: _child("Failed", 9.0, 9.0),  # failed cells are never best
        4: _child("Running"),
    }
    status = status_body(sst.sweep_status("grid", _cells(), children, stop_on_failure=False))
    assert status["phase"] == "Running"
    assert status["progress"] == "3/4"
    assert (status["cellsDone"], status["cellsSucceeded"], status["cellsFailed"]) == (3, 2, 1)
    rows = status["cells"]
    assert [r["phase"] for r in rows] == ["Succeeded", "Succeeded", "Failed", "Running"]
    assert rows[1]["settings"] == {"backend": "gcs", "threads": 16}
    assert rows[1]["saveGiBps"] == 2.0 and rows[1]["saveSeconds"] == 0.5
    assert "saveGiBps" not in rows[3]
    assert status["bestSave"]["cell"] == 2 and status["bestSave"]["name"] == "grid-c2"
    assert status["bestLoad"]["cell"] == 1
    assert status["bestSaveCell"] == "grid-c2 (backend=gcs threads=16)"
    assert rows[0]["saveGiBpsCi"] == {"low": 0.99, "high": 1.01}


def test_status_names_no_best_where_intervals_overlap() -> None:
    children = {
        1: _child("Succeeded", 0.075, 1.0, spread=0.1),  # 0.0675-0.0825
        2: _child("Succeeded", 0.073, 3.0, spread=0.1),  # 0.0657-0.0803: overlaps cell 1
        3: _child("Succeeded", 0.010, 2.0, spread=0.1),  # far below: not tied
        4: _child("Succeeded", 0.074, 0.5, spread=None),  # one sample: no interval
    }
    status = status_body(sst.sweep_status("grid", _cells(), children, stop_on_failure=False))
    assert "bestSave" not in status
    assert status["bestSaveCell"] == "indistinguishable (grid-c1, grid-c2, grid-c4)"
    # Loads: cell 2's interval (2.7-3.3) is above all others (cell 4's one sample cannot be told
    # from anything, so it ties with any leader): still indistinguishable.
    assert status["bestLoadCell"] == "indistinguishable (grid-c2, grid-c4)"
    del children[4]
    status = status_body(sst.sweep_status("grid", _cells()[:3], children, stop_on_failure=False))
    assert status["bestLoad"]["name"] == "grid-c2"
    assert status["bestLoadCell"] == "grid-c2 (backend=gcs threads=16)"


@pytest.mark.parametrize(
    ("phases", "stop", "phase"),
    [
        ({}, False, "Pending"),
        ({1: "Running"}, False, "Running"),
        ({1: "Succeeded", 2: "Succeeded", 3: "Succeeded", 4: "Succeeded"}, False, "Succeeded"),
        ({1: "Succeeded", 2: "Failed", 3: "Succeeded", 4: "Succeeded"}, False, "Failed"),
        ({1: "Failed"}, False, "Running"),  # going on after the failure
        ({1: "Failed"}, True, "Failed"),  # stopped
    ],
)
def test_sweep_phase(phases: dict[int, str], stop: bool, phase: str) -> None:
    children = {n: _child(p) for n, p in phases.items()}
    assert sst.sweep_status("grid", _cells(), children, stop).phase == phase


def test_status_stays_bounded() -> None:
    obj = sweep(axes={"threads": list(range(1, 65))})
    cells = sc.expand(parse_sweep(obj["spec"]))
    children = {c.number: _child("Succeeded", 1.0, 1.0) for c in cells}
    status = status_body(sst.sweep_status("grid", cells, children, False))
    assert len(status["cells"]) == 64
    assert len(yaml.safe_dump(status)) < 32 * 1024


# ---------------------------------------------------------------------------------------------
# The generated CRD


def test_committed_sweep_crd_is_generated_from_the_model() -> None:
    for path in (ROOT / sweep_crd.CRD_FILE, ROOT / "charts/ckptbench" / sweep_crd.CRD_FILE):
        assert yaml.safe_load(path.read_text()) == SWEEP_CRD, (
            f"{path} is out of date; run `ckptbench crd --kind sweep > {sweep_crd.CRD_FILE}`"
        )


def test_sweep_crd_status_schema_is_generated_from_the_model() -> None:
    status = SWEEP_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status == {
        **model_schema(sst.SweepStatus),
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert set(status["properties"]) == {f.alias for f in sst.SweepStatus.model_fields.values()}
    row = status["properties"]["cells"]["items"]["properties"]
    assert {"cell", "name", "settings", "phase", "saveGiBps", "loadSeconds"} <= set(row)
    assert set(status["properties"]["bestSave"]["properties"]) == {
        "cell",
        "name",
        "settings",
        "GiBps",
    }


@pytest.mark.parametrize(
    "body",
    [
        {"phase": "Running", "cellsRunning": 1},
        {
            "phase": "Running",
            "cells": [{"cell": 1, "name": "c", "settings": {}, "phase": "P", "x": 1}],
        },
        {
            "phase": "Running",
            "bestSave": {"cell": 1, "name": "c", "settings": "", "GiBps": 1, "y": 2},
        },
    ],
    ids=["top", "row", "best"],
)
def test_an_undeclared_sweep_status_field_cannot_be_written(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        sst.SweepStatus.model_validate(body)


def test_a_sweep_status_reads_back_as_written() -> None:
    children = {1: _child("Succeeded", 1.0, 3.0), 2: _child("Failed")}
    status = sst.sweep_status("grid", _cells(), children, stop_on_failure=True)
    assert sst.SweepStatus.model_validate(status_body(status)) == status


def test_sweep_crd_names_and_columns() -> None:
    names = SWEEP_CRD["spec"]["names"]
    assert names["shortNames"] == ["ckbs"] and names["categories"] == ["ckptbench"]
    columns = {
        c["name"]: c["jsonPath"]
        for c in SWEEP_CRD["spec"]["versions"][0]["additionalPrinterColumns"]
    }
    assert columns["Progress"] == ".status.progress"
    assert columns["Best Save"] == ".status.bestSaveCell"
    assert columns["Best Load"] == ".status.bestLoadCell"


# The CheckpointBenchmarkSweeps; the DataLoadingBenchmarkSweep's are tests/test_data_sweep.py's.
EXAMPLES = sorted(
    p
    for p in (ROOT / "examples" / "sweeps").glob("*.yaml")
    if "kind: CheckpointBenchmarkSweep" in p.read_text()
)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_sweeps_validate_by_model_and_crd(path: Path) -> None:
    (obj,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    obj["metadata"].setdefault("namespace", "default")
    assert refusals(obj) == ("", [])
    assert len(sc.expand(parse_sweep(obj["spec"]))) >= 2


def test_there_are_example_sweeps() -> None:
    assert EXAMPLES


def test_model_and_procedure_are_axes_too() -> None:
    template = {"worldSize": 2, "checkpointPath": "gs://bucket/sweep"}
    obj = sweep(
        template=template,
        axes={
            "model": ["llama3-debug", "llama3-8b"],
            "procedure": ["ckptbench", "reference"],
        },
    )
    assert refusals(obj) == ("", [])
    cells = sc.expand(parse_sweep(obj["spec"]))
    assert [c.label for c in cells] == [
        "model=llama3-debug procedure=ckptbench",
        "model=llama3-debug procedure=reference",
        "model=llama3-8b procedure=ckptbench",
        "model=llama3-8b procedure=reference",
    ]
    child = sc.render_child("grid", "default", "uid-1", cells[2])
    assert child["spec"]["model"] == "llama3-8b"
    assert child["spec"]["procedure"] == "ckptbench"
    assert "layerSize" not in child["spec"]  # a default would clash with the model
    assert schema_errors(child) == [] and cel_failures(child) == []


@pytest.mark.parametrize(
    ("axes", "says"),
    [
        ({"procedure": ["fastest"]}, "spec.axes.procedure[0]: Input should be 'ckptbench'"),
        ({"model": ["gpt-2"]}, "spec.axes.model[0]: String should match pattern"),
        (
            {"model": ["llama3-debug", "llama3-debug"]},
            "spec.axes.model: 'llama3-debug' is listed twice",
        ),
    ],
)
def test_bad_model_or_procedure_values_are_refused(axes: dict[str, Any], says: str) -> None:
    template = {"worldSize": 2, "checkpointPath": "gs://bucket/sweep"}
    model, _ = refusals(sweep(template=template, axes=axes))
    assert says in model


# ---- conditions -----------------------------------------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def _conditions(status: sst.SweepStatusBase) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status_body(status)["conditions"]}


def test_a_sweep_has_the_benchmarks_complete_and_failed_conditions() -> None:
    running = {1: _child("Succeeded", 1.0, 1.0), 2: _child("Running")}
    status = sst.with_conditions(sst.sweep_status("grid", _cells(), running, False), {}, T0, 3)
    found = _conditions(status)
    assert set(found) == {"Complete", "Failed"}
    assert found["Complete"]["status"] == "False" and found["Complete"]["reason"] == "Running"
    assert found["Failed"]["status"] == "False"
    assert found["Failed"]["observedGeneration"] == 3
    done = {n: _child("Succeeded", 1.0, 1.0) for n in range(1, 5)}
    status = sst.with_conditions(sst.sweep_status("grid", _cells(), done, False), {}, T0, 3)
    complete = _conditions(status)["Complete"]
    assert (complete["status"], complete["reason"]) == ("True", "AllCellsSucceeded")
    failing = {**done, 2: _child("Failed", 1.0, 1.0)}
    status = sst.with_conditions(sst.sweep_status("grid", _cells(), failing, False), {}, T0, 3)
    failed = _conditions(status)["Failed"]
    assert (failed["status"], failed["reason"]) == ("True", "CellsFailed")
    assert failed["message"] == "1 of 4 cells failed"
    invalid = sst.with_conditions(sst.invalid_status("spec.axes: bad"), {}, T0, 1)
    assert _conditions(invalid)["Failed"]["reason"] == "InvalidSpec"


def test_a_sweep_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    running = {1: _child("Running")}
    first = status_body(
        sst.with_conditions(sst.sweep_status("g", _cells(), running, False), {}, T0, 1)
    )
    more = {1: _child("Succeeded", 1.0, 1.0), 2: _child("Running")}
    again = sst.with_conditions(sst.sweep_status("g", _cells(), more, False), first, T1, 1)
    kept = _conditions(again)
    assert kept["Complete"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # still False
    done = {n: _child("Succeeded", 1.0, 1.0) for n in range(1, 5)}
    flipped = sst.with_conditions(sst.sweep_status("g", _cells(), done, False), first, T1, 1)
    assert _conditions(flipped)["Complete"]["lastTransitionTime"] == "2026-01-01T00:05:00Z"


def test_the_sweep_crd_keeps_conditions_as_a_map_keyed_by_type() -> None:
    crd = yaml.safe_load(sweep_crd.crd_yaml())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    conditions = status["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["required"]) >= {"type", "status", "lastTransitionTime"}
