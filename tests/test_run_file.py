"""``ckptbench run -f``: the YAML a cluster takes, run on this machine (issue 22)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ckptbench import manifest_run
from ckptbench.operator.spec.parse import SpecError, parse_spec

ROOT = Path(__file__).resolve().parent.parent
HEAD = "apiVersion: ckptbench.dev/v1alpha1\nkind: CheckpointBenchmark\nmetadata: {name: x}\n"


def _file(tmp_path: Path, spec: str, head: str = HEAD) -> str:
    path = tmp_path / "bench.yaml"
    path.write_text(head + "spec:\n" + "".join(f"  {line}\n" for line in spec.splitlines()))
    return str(path)


def _ckptbench(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", *argv],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_each_setting_the_spec_sets_becomes_its_option(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "worldSize: 3\nmodel: llama3-debug\nlayers: 1\nverify: false\nprocedure: reference\n"
        "warmupSamples: 0\nbackend: gcsfs\ncheckpointPath: gs://bkt/x\npartSizeBytes: 8388608\n"
        "image: reg/img:1\nvolumes: []\n",
    )
    options, notes = manifest_run.options_of(path)
    assert options == [
        "--world-size", "3", "--model", "llama3-debug", "--layers", "1",
        "--procedure", "reference", "--warmup", "0", "--no-verify", "--backend", "gcsfs",
        "--storage", "gs://bkt/x", "--part-size", "8388608",
    ]  # fmt: skip
    assert notes == ["image, volumes: a cluster's settings, without effect here"]


def test_a_spec_the_operator_refuses_is_refused_with_the_operators_message(
    tmp_path: Path,
) -> None:
    spec = "worldSize: 8\npaddingSize: 4\ncheckpointPath: gs://bkt/x"
    with pytest.raises(SpecError) as operator:
        parse_spec({"worldSize": 8, "paddingSize": 4, "checkpointPath": "gs://bkt/x"})
    with pytest.raises(manifest_run.ManifestProblem) as local:
        manifest_run.options_of(_file(tmp_path, spec))
    assert str(operator.value) in str(local.value)
    assert "spec.paddingSize" in str(local.value)


def test_a_sweep_of_explicit_cells_or_a_varied_switch_is_refused_by_name(tmp_path: Path) -> None:
    head = HEAD.replace("kind: CheckpointBenchmark", "kind: CheckpointBenchmarkSweep")
    cells = "template: {checkpointPath: gs://bkt/x}\ncells: [{threads: 4}]"
    with pytest.raises(manifest_run.ManifestProblem, match=r"spec\.cells: a list of cells cannot"):
        manifest_run.options_of(_file(tmp_path, cells, head))
    switch = "template: {checkpointPath: gs://bkt/x}\naxes: {asyncSave: [true, false]}"
    with pytest.raises(manifest_run.ManifestProblem, match=r"spec\.axes\.asyncSave: a switch"):
        manifest_run.options_of(_file(tmp_path, switch, head))


def test_the_smoke_example_runs_here_with_a_local_storage(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    proc = _ckptbench(
        "run", "-f", str(ROOT / "examples" / "smoke.yaml"),
        "--storage", str(tmp_path / "store"), "--json", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "the command line replaces --storage of" in proc.stderr
    assert "resources, volumeMounts, volumes: a cluster's settings" in proc.stderr
    [run] = json.loads(out.read_text())["runs"]
    settings = run["extra"]["settings"]
    assert (settings["world_size"], settings["layer_size"], settings["sample_count"]) == (
        2,
        1000,
        2,
    )
    assert settings["rendezvous_timeout_seconds"] == 300.0  # the file's, not the laptop default
    assert settings["checkpoint_path"] == str(tmp_path / "store")  # the command line's
    assert run["verified"] is True


def test_a_sweep_example_runs_as_a_local_sweep(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    proc = _ckptbench(
        "run", "-f", str(ROOT / "examples" / "sweeps" / "gcs-vs-gcsfs-threads.yaml"), "--emulator",
        "--world-size", "1", "--layer-size", "100", "--padding-size", "2", "--samples", "1",
        "--json", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(out.read_text())["runs"]
    cells = [(r["extra"]["settings"]["backend"], r["extra"]["axes"].get("threads")) for r in runs]
    assert cells == [("gcs", "4"), ("gcs", "16"), ("gcsfs", "4"), ("gcsfs", "16")]
    assert all(r["verified"] for r in runs)


def test_a_file_option_without_a_file_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert manifest_run.main(["--samples", "1", "-f"]) == manifest_run.EXIT_USAGE
    assert "ckptbench run: error: -f: needs a file" in capsys.readouterr().err
