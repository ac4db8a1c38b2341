"""Both demands at once end to end: a local run (2 ranks; a folder, and the embedded GCS
emulator) prints both sides' slowdowns with their 95% intervals and the JSON carries them; a
manifest's dataLoading reaches the run; the memory plan counts the loader."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckptbench.manifest_run import _settings_options
from ckptbench.operator.spec.parse import parse_spec
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.data import memory as data_memory
from ckptbench.workload.contract.data.settings import LoaderSettings
from ckptbench.workload.contract.results.rank import TERMINATION_MESSAGE_LIMIT, RankResult

ARGS = [
    "--world-size", "2", "--layer-size", "1000", "--padding-size", "4", "--samples", "3",
    "--train-every", "3", "--save-mode", "thread", "--data-loading", "--data-compute", "0.005",
    "--quiet",
]  # fmt: skip


@pytest.mark.parametrize("where", ["file", "gcs"])
def test_a_run_of_both_demands_prints_both_slowdowns_with_intervals(
    where: str, tmp_path: Path
) -> None:
    out = tmp_path / "out.json"
    storage = ["--storage", str(tmp_path / "store"), "--backend", "file"] if where == "file" else []
    (tmp_path / "store").mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ckptbench.cli import main; main()",
            "run",
            *storage,
            *ARGS,
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for side in ("loader", "save", "stall"):
        line = next(x for x in done.stdout.splitlines() if x.startswith(f"both: {side} slowdown"))
        assert "x [" in line and line.rstrip().endswith("x]"), line
    text = out.read_text()
    if where == "file":  # the rank's result keeps its figures within the termination message
        for path in (tmp_path / "store").glob("run-*/results/rank-*.json"):
            result = RankResult.model_validate_json(path.read_text())
            message = result.to_termination_message()
            assert len(message.encode()) <= TERMINATION_MESSAGE_LIMIT
            assert RankResult.from_termination_message(message).both == result.both
            assert result.both is not None and result.both.cycles == 3
    assert '"loader_slowdown"' in text and '"save_slowdown"' in text and '"stall_slowdown"' in text


def test_a_manifests_data_loading_becomes_the_loaders_options() -> None:
    spec = parse_spec(
        {
            "checkpointPath": "gs://bucket/p",
            "trainEvery": 3,
            "dataLoading": {"batchSize": 16, "shuffle": False, "preset": "mlperf-cosmoflow"},
        }
    )
    options = _settings_options(spec)
    at = options.index("--data-loading")
    given = options[at + 1 :]
    assert given[given.index("--data-batch-size") + 1] == "16"
    assert given[given.index("--data-preset") + 1] == "mlperf-cosmoflow"
    assert "--data-no-shuffle" in given


def test_the_memory_plan_counts_the_loader_a_step_reads_from() -> None:
    base = {"checkpoint_path": "/tmp/x", "backend": "file", "train_every": 4}
    matrices = WorkloadConfig(**base).memory_estimate().train_bytes
    group = {"backend": "file", "batch_size": 64, "num_workers": 3, "files": 4}
    loader = WorkloadConfig(**base, data_loading=group).memory_estimate()
    assert loader.train_bytes == data_memory.loader_bytes(LoaderSettings(**group))
    assert loader.train_bytes != matrices
    # 3 workers x 2 batches ahead + the one in hand, twice, of 64 samples of resnet50's size.
    assert loader.train_bytes >= 2 * 7 * 64 * 114_660
