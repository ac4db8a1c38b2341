"""DataLoadingBenchmarkSweep: axes are the data settings declared as axes (model and CRD alike),
its children are DataLoadingBenchmarks, its rows copy the child's typed status, its best cell is
the most samples/s among the cells that keep the AU floor, and its example renders and runs."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic.alias_generators import to_camel

from ckptbench import manifest_data, manifest_run
from ckptbench.operator import render_cli
from ckptbench.operator.data import crd as data_crd
from ckptbench.operator.data.model import DataLoadingBenchmarkSpec
from ckptbench.operator.data.status_schema import DataLoadingStatus
from ckptbench.operator.spec.status_schema import status_body
from ckptbench.operator.sweep import cells as sc
from ckptbench.operator.sweep import crd as sweep_crd
from ckptbench.operator.sweep import data_status as dst
from ckptbench.operator.sweep import status as sst
from ckptbench.operator.sweep.cells import CellError
from ckptbench.operator.sweep.kinds import CHECKPOINT_SWEEP, DATA_SWEEP, sweep_kind_of
from ckptbench.operator.sweep.model import DataLoadingBenchmarkSweepSpec, parse_sweep_of
from ckptbench.workload.contract.data import settings as data_settings
from ckptbench.workload.contract.results.summaries import Interval
from tests.crd_validation import cel_failures, schema_errors

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "sweeps" / "dataflux-vs-gcs-workers.yaml"
SWEEP_CRD = sweep_crd.build_crd(DATA_SWEEP)
CHILD_CRD = data_crd.build_crd()
TEMPLATE = {"dataPath": "gs://bucket/data", "preset": "dataflux-100kib", "worldSize": 2}


def sweep(name: str = "grid", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ckptbench.dev/v1alpha1",
        "kind": "DataLoadingBenchmarkSweep",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"template": copy.deepcopy(TEMPLATE), **spec},
    }


def parse(obj: dict[str, Any]) -> DataLoadingBenchmarkSweepSpec:
    return parse_sweep_of(DataLoadingBenchmarkSweepSpec, obj["spec"])


def refusals(obj: dict[str, Any]) -> tuple[str, list[str]]:
    """(the model's message, the API server's: schema errors, else CEL failures)."""
    try:
        parse(obj)
        model = ""
    except (ValueError, CellError) as exc:
        model = str(exc)
    return model, schema_errors(obj, SWEEP_CRD) or cel_failures(obj, SWEEP_CRD)


# -- the spec ---------------------------------------------------------------------------------


def test_the_axes_are_the_data_settings_declared_as_axes() -> None:
    declared = [d.name for d in data_settings.declared() if d.setting.axis]
    assert sc.DATA.axis_fields() == declared
    assert {"backend", "num_workers", "preset", "accelerators_per_rank"} <= set(declared)
    axes = SWEEP_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["axes"]["properties"]
    assert list(axes) == [to_camel(f) for f in declared]
    assert "threads" not in axes
    # The data reader's enum, not the checkpoint backends'.
    assert "dataflux" in axes["backend"]["items"]["enum"]


def test_a_data_grid_is_accepted_by_model_and_crd() -> None:
    obj = sweep(axes={"backend": ["dataflux", "gcs"], "numWorkers": [0, 8]})
    assert refusals(obj) == ("", [])
    cells = sc.expand(parse(obj))
    assert [c.label for c in cells] == [
        "backend=dataflux numWorkers=0",
        "backend=dataflux numWorkers=8",
        "backend=gcs numWorkers=0",
        "backend=gcs numWorkers=8",
    ]


@pytest.mark.parametrize(
    ("axes", "says"),
    [
        # A checkpoint setting is no axis of a data sweep, and a data value keeps its bounds.
        ({"threads": [4, 16]}, "spec.axes.threads: Extra inputs are not permitted"),
        ({"numWorkers": [2, 65]}, "spec.axes.numWorkers[1]: Input should be less than or equal"),
        ({"backend": ["gcs", "gcsfs", "hdfs"]}, "spec.axes.backend[2]: Input should be"),
    ],
)
def test_an_axis_not_of_the_data_settings_is_refused_by_model_and_crd(
    axes: dict[str, Any], says: str
) -> None:
    model, server = refusals(sweep(axes=axes))
    assert says in model
    assert server, "the API server must refuse it too"


def test_a_cell_that_makes_an_invalid_data_benchmark_is_refused_naming_the_cell() -> None:
    # Reader dataflux maps whole objects: a preset of several samples a file needs sharding file.
    obj = sweep(axes={"preset": ["dataflux-100kib", "mlperf-resnet50"], "backend": ["dataflux"]})
    with pytest.raises(
        ValueError,
        match=r"axes \(cell 2: backend=dataflux preset=mlperf-resnet50\): makes an invalid "
        "benchmark: backend maps whole objects",
    ):
        parse(obj)


def test_the_children_are_data_loading_benchmarks_owned_by_the_sweep() -> None:
    obj = sweep(axes={"backend": ["dataflux", "gcs"]})
    cells = sc.expand(parse(obj))
    child = sc.render_child("grid", "default", "uid-1", cells[1])
    assert (child["apiVersion"], child["kind"]) == (
        "ckptbench.dev/v1alpha1",
        "DataLoadingBenchmark",
    )
    assert child["metadata"]["name"] == "grid-c2"
    assert child["metadata"]["labels"] == {sc.LABEL_SWEEP: "grid", sc.LABEL_CELL: "2"}
    (owner,) = child["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "DataLoadingBenchmarkSweep",
        "uid-1",
        True,
    )
    assert child["spec"] == {**TEMPLATE, "backend": "gcs"}
    assert schema_errors(child, CHILD_CRD) == [] and cel_failures(child, CHILD_CRD) == []
    assert sc.DATA.plural == "dataloadingbenchmarks"


def test_each_sweep_kind_is_found_by_its_name() -> None:
    assert sweep_kind_of("DataLoadingBenchmarkSweep") is DATA_SWEEP
    assert sweep_kind_of("CheckpointBenchmarkSweep") is CHECKPOINT_SWEEP
    assert sweep_kind_of("DataLoadingBenchmark") is None


# -- the CRD ------------------------------------------------------------------------------------


def test_the_crd_files_are_generated_from_the_model() -> None:
    text = sweep_crd.data_crd_yaml()
    for path in (
        ROOT / sweep_crd.DATA_CRD_FILE,
        ROOT / "charts/ckptbench" / sweep_crd.DATA_CRD_FILE,
    ):
        assert path.read_text() == text, f"run `ckptbench crd --kind data-sweep > {path}`"
    names = SWEEP_CRD["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == (
        "DataLoadingBenchmarkSweep",
        "dataloadingbenchmarksweeps",
        ["dlbs"],
    )


def test_the_printer_columns_read_fields_of_the_status_model() -> None:
    (version,) = SWEEP_CRD["spec"]["versions"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Best"] == ".status.bestCell"
    for path in columns.values():
        if path.startswith(".status."):
            assert path.removeprefix(".status.") in status, path


# -- the status ---------------------------------------------------------------------------------


def _child(
    rate: float | None,
    *,
    phase: str = "Succeeded",
    passed: bool | None = True,
    spread: float = 1.0,
) -> dict[str, Any]:
    status = DataLoadingStatus(
        phase=phase,
        samples_per_second=rate,
        samples_per_second_interval=(
            Interval(low=rate - spread, high=rate + spread) if rate is not None else None
        ),
        # bytes/s differs from samples/s: a row that read it instead would show it.
        bytes_per_second=rate * 1000 if rate is not None else None,
        accelerator_utilization=0.95 if passed else 0.5,
        accelerator_utilization_interval=Interval(low=0.9, high=0.97),
        au_floor=0.9 if passed is not None else None,
        au_passed=passed,
        sustained_accelerators=4,
        first_batch_seconds=1.25,
    )
    return {"status": status_body(status)}


GRID = sweep(axes={"backend": ["dataflux", "gcs"], "numWorkers": [2, 8]})


def _status(children: dict[int, dict[str, Any]]) -> dst.DataSweepStatus:
    cells = sc.expand(parse(GRID))
    return sst.sweep_status("grid", cells, children, False, dst.DATA_TABLE)


def test_a_row_copies_the_childs_typed_status() -> None:
    status = _status({1: _child(100.0), 2: _child(None, phase="Running")})
    assert status.cells is not None
    row = status.cells[0]
    assert (row.name, row.phase, row.settings) == (
        "grid-c1",
        "Succeeded",
        {"backend": "dataflux", "numWorkers": 2},
    )
    assert row.samples_per_second == 100.0
    assert row.samples_per_second_interval == Interval(low=99.0, high=101.0)
    assert row.accelerator_utilization == 0.95
    assert row.accelerator_utilization_interval == Interval(low=0.9, high=0.97)
    assert (row.au_floor, row.au_passed, row.sustained_accelerators) == (0.9, True, 4)
    assert row.first_batch_seconds == 1.25
    assert status.cells[1].phase == "Running" and status.cells[1].samples_per_second is None
    assert [r.phase for r in status.cells[2:]] == ["Pending", "Pending"]
    assert (status.phase, status.progress) == ("Running", "1/4")
    body = status_body(status)
    assert body["cells"][0]["samplesPerSecond"] == 100.0
    assert body["cells"][0]["auPassed"] is True


def test_the_best_is_the_most_samples_among_the_cells_that_keep_the_au_floor() -> None:
    status = _status(
        {
            1: _child(100.0),
            2: _child(300.0, passed=False),  # the fastest, but its accelerators starved
            3: _child(200.0),
            4: _child(50.0),
        }
    )
    assert status.best is not None
    assert (status.best.cell, status.best.name, status.best.samples_per_second) == (
        3,
        "grid-c3",
        200.0,
    )
    assert status.best.settings == "backend=gcs numWorkers=2"
    assert status.best_cell == "grid-c3 (backend=gcs numWorkers=2)"
    assert status.phase == "Succeeded"


def test_a_cell_without_a_floor_competes_and_a_failed_cell_does_not() -> None:
    status = _status(
        {
            1: _child(100.0, passed=None),
            2: _child(900.0, phase="Failed"),
            3: _child(10.0),
            4: _child(20.0),
        }
    )
    assert status.best is not None and status.best.cell == 1
    assert status.phase == "Failed" and status.message == "1 of 4 cells failed"


def test_overlapping_intervals_are_indistinguishable() -> None:
    status = _status(
        {
            1: _child(100.0, spread=30.0),
            2: _child(120.0, spread=30.0),
            3: _child(10.0),
            4: _child(5.0),
        }
    )
    assert status.best is None
    assert status.best_cell == "indistinguishable (grid-c1, grid-c2)"


def test_when_every_cell_fails_the_floor_none_is_best_and_the_line_says_so() -> None:
    status = _status({n: _child(100.0 * n, passed=False) for n in range(1, 5)})
    assert status.best is None
    assert status.best_cell == dst.NO_CELL_KEEPS_THE_FLOOR


def test_an_invalid_sweep_gets_the_data_status_model() -> None:
    status = sst.invalid_status("spec.axes: bad", dst.DATA_TABLE)
    assert isinstance(status, dst.DataSweepStatus)
    assert (status.phase, status.reason) == ("Failed", "InvalidSpec")


# -- the example, rendered and run here --------------------------------------------------------


def _example() -> dict[str, Any]:
    (obj,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    assert isinstance(obj, dict)
    return obj


def test_the_example_is_valid_by_model_and_crd() -> None:
    obj = _example()
    obj["metadata"].setdefault("namespace", "default")
    assert refusals(obj) == ("", [])
    cells = sc.expand(parse(obj))
    assert len(cells) == 8
    assert {c.values["backend"] for c in cells} == {"dataflux", "gcs"}
    assert all(isinstance(c.spec, DataLoadingBenchmarkSpec) for c in cells)


def test_render_renders_the_jobset_of_each_data_child(capsys: pytest.CaptureFixture[str]) -> None:
    assert render_cli.main(["-f", str(EXAMPLE), "--default-image", "i"]) == 0
    captured = capsys.readouterr()
    jobsets = [d for d in yaml.safe_load_all(captured.out) if d]
    cells = sc.expand(parse(_example()))
    assert [j["metadata"]["name"] for j in jobsets] == [
        sc.child_name("dataflux-regimes", c.number) for c in cells
    ]
    for jobset, cell in zip(jobsets, cells, strict=True):
        (owner,) = jobset["metadata"]["ownerReferences"]
        assert owner["kind"] == "DataLoadingBenchmark"
        pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert container["command"][:2] == ["ckptbench", "data-worker"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["CKPTBENCH_BACKEND"] == cell.values["backend"]
        assert env["CKPTBENCH_NUM_WORKERS"] == str(cell.values["numWorkers"])
        assert env["CKPTBENCH_PRESET"] == cell.values["preset"]
    assert "8 cell(s), rendered as its child benchmarks" in captured.err


def test_data_f_makes_the_axes_comma_lists() -> None:
    options, notes = manifest_data.options_of(str(EXAMPLE))
    assert options == [
        "--storage", "gs://my-bucket/ckptbench-data", "--world-size", "4", "--epochs", "3",
        "--backend", "dataflux,gcs", "--preset", "dataflux-100kib,dataflux-3mib",
        "--workers", "2,8",
    ]  # fmt: skip
    assert notes == ["resources: a cluster's settings, without effect here"]


def test_each_command_sends_the_other_kinds_sweep_to_the_other(tmp_path: Path) -> None:
    with pytest.raises(manifest_run.ManifestProblem, match="run it with `ckptbench data -f"):
        manifest_run.options_of(str(EXAMPLE))
    checkpoint = ROOT / "examples" / "sweeps" / "gcs-vs-gcsfs-threads.yaml"
    with pytest.raises(manifest_run.ManifestProblem, match="run it with `ckptbench run -f"):
        manifest_data.options_of(str(checkpoint))
    path = tmp_path / "cells.yaml"
    obj = sweep(cells=[{"backend": "gcs"}, {"numWorkers": 2}])
    path.write_text(yaml.safe_dump(obj))
    with pytest.raises(manifest_run.ManifestProblem, match=r"spec\.cells: a list of cells cannot"):
        manifest_data.options_of(str(path))


def test_a_data_sweep_file_runs_here_as_a_local_sweep(tmp_path: Path) -> None:
    obj = sweep(axes={"numWorkers": [0, 1]})
    obj["spec"]["template"].update(
        backend="file",
        dataPath=str(tmp_path / "store"),
        files=8,
        batchSize=4,
        worldSize=1,
        epochs=1,
    )
    path = tmp_path / "dlbs.yaml"
    path.write_text(yaml.safe_dump(obj))
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "data", "-f", str(path), "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(out.read_text())["runs"]
    assert [r["settings"]["num_workers"] for r in runs] == [0, 1]
    assert all(r["settings"]["backend"] == "file" for r in runs)


def test_the_sweeps_doc_names_every_data_axis_and_the_example() -> None:
    doc = (ROOT / "docs" / "sweeps.md").read_text()
    part = doc.split("## DataLoadingBenchmarkSweep", 1)[1].split("\n## ", 1)[0]
    assert [f for f in sc.DATA.axis_fields() if f"`{to_camel(f)}`" not in part] == []
    assert f"examples/sweeps/{EXAMPLE.name}" in part
