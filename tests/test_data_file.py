"""``ckptbench data -f``: the DataLoadingBenchmark a cluster takes, run on this machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ckptbench import manifest_data, manifest_run
from ckptbench.operator.data.model import parse_data_spec
from ckptbench.operator.spec.parse import SpecError

HEAD = "apiVersion: ckptbench.dev/v1alpha1\nkind: DataLoadingBenchmark\nmetadata: {name: x}\n"


def _file(tmp_path: Path, spec: str, head: str = HEAD) -> str:
    path = tmp_path / "dlb.yaml"
    path.write_text(head + "spec:\n" + "".join(f"  {line}\n" for line in spec.splitlines()))
    return str(path)


def test_each_setting_the_spec_sets_becomes_its_option(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "backend: dataflux\ndataPath: gs://bkt/data\npreset: fineweb-parquet\nsharding: file\n"
        "worldSize: 3\nnumWorkers: 1\nshuffle: false\ndatafluxCompose: true\nsampleBytes: 1024\n"
        "image: reg/img:1\nqueueName: team-a\n",
    )
    options, notes = manifest_data.options_of(path)
    assert options == [
        "--backend", "dataflux", "--preset", "fineweb-parquet", "--sample-size", "1024",
        "--workers", "1", "--no-shuffle", "--sharding", "file", "--storage", "gs://bkt/data",
        "--world-size", "3",
    ]  # fmt: skip
    # datafluxCompose: true is the default the switch turns off: nothing to pass.
    assert notes == ["image, queueName: a cluster's settings, without effect here"]


def test_a_spec_the_operator_refuses_is_refused_with_the_operators_message(
    tmp_path: Path,
) -> None:
    with pytest.raises(SpecError) as operator:
        parse_data_spec({"dataPath": "gs://bkt/x", "preset": "fineweb-parquet"})
    with pytest.raises(manifest_run.ManifestProblem) as local:
        manifest_data.options_of(_file(tmp_path, "dataPath: gs://bkt/x\npreset: fineweb-parquet"))
    assert str(operator.value) in str(local.value)
    assert "spec.sharding must be file" in str(local.value)


def test_a_misspelt_field_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(manifest_run.ManifestProblem, match=r"spec\.numWorkerz: Extra inputs"):
        manifest_data.options_of(_file(tmp_path, "dataPath: gs://bkt/x\nnumWorkerz: 2"))


def test_each_command_names_the_other_for_the_others_kind(tmp_path: Path) -> None:
    checkpoint = HEAD.replace("DataLoadingBenchmark", "CheckpointBenchmark")
    path = _file(tmp_path, "checkpointPath: gs://bkt/x", checkpoint)
    with pytest.raises(manifest_run.ManifestProblem, match="run it with `ckptbench run -f"):
        manifest_data.options_of(path)
    path = _file(tmp_path, "dataPath: gs://bkt/x")
    with pytest.raises(manifest_run.ManifestProblem, match="run it with `ckptbench data -f"):
        manifest_run.options_of(path)
    typo = HEAD.replace("DataLoadingBenchmark", "DataLoadingBenchmarc")
    with pytest.raises(manifest_run.ManifestProblem, match="kind: expected DataLoadingBenchmark"):
        manifest_data.options_of(_file(tmp_path, "dataPath: gs://bkt/x", typo))


def test_a_file_runs_here_and_the_command_line_wins(tmp_path: Path) -> None:
    store, out = tmp_path / "store", tmp_path / "out.json"
    path = _file(
        tmp_path,
        f"backend: file\ndataPath: {tmp_path / 'elsewhere'}\npreset: dataflux-100kib\n"
        "files: 64\nbatchSize: 4\nworldSize: 1\nnumWorkers: 0\nepochs: 1\n"
        "resources: {limits: {memory: 4Gi}}\n",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "data", "-f", path, "--files", "8",
         "--storage", str(store), "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "the command line replaces --files, --storage of" in proc.stderr
    assert "resources: a cluster's settings, without effect here" in proc.stderr
    [run] = json.loads(out.read_text())["runs"]
    settings = run["settings"]
    assert (settings["files"], settings["batch_size"], settings["num_workers"]) == (8, 4, 0)
    assert settings["data_path"] == str(store)
    assert not (tmp_path / "elsewhere").exists()


def test_the_help_offers_the_file_option_for_a_data_loading_benchmark() -> None:
    from ckptbench.workload.local.data.options import build_parser

    text = " ".join(build_parser().format_help().split())
    assert (
        "--filename FILE -f FILE: run the DataLoadingBenchmark or DataLoadingBenchmarkSweep (axes) "
        "in this YAML file" in text
    )
    assert "Checkpoint" not in text
