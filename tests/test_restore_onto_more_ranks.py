"""A restore onto more ranks than saved (``loadWorldSize > worldSize``, gcsfs's 4 -> 8), in real
local runs: the first worldSize ranks save with their own group, all loadWorldSize ranks load
their rows of the larger mesh and verify them bit for bit.

The runs are small (llama3-debug with one layer: about 25 MB) and bounded by ``--timeout``, so a
save that wrongly waits for ranks outside the saving group fails in seconds, not in gloo's 30
minutes.
"""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ckptbench.workload.contract.checkpoint import models
from ckptbench.workload.contract.results.rank import RankResult
from tests import workers
from tests.workers import small_config

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parent.parent
ENV = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
SAVED, LOADED = 2, 4
ARGS = (
    "--model", "llama3-debug", "--layers", "1", "--world-size", str(SAVED),
    "--load-world-size", str(LOADED), "--samples", "2", "--warmup", "0", "--timeout", "90",
)  # fmt: skip


def _run(tmp_path: Path, *argv: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    out, table = tmp_path / "run.json", tmp_path / "run.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "run", *ARGS, *argv,
         "--json", str(out), "--csv", str(table)],
        cwd=ROOT, capture_output=True, text=True, timeout=200, env=ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [run] = json.loads(out.read_text())["runs"]
    [row] = list(csv.DictReader(table.open()))
    return proc.stdout, run, row


def _rank_results(results: Path) -> list[RankResult]:
    return [
        RankResult.model_validate_json((results / f"rank-{r:05d}.json").read_text())
        for r in range(LOADED)
    ]


def _tensors() -> list[models.StateTensor]:
    return models.state_tensors(models.ModelSpec("llama3-debug", layers=1))


def _check_summary(run: dict[str, Any], row: dict[str, str]) -> None:
    assert run["world_size"] == SAVED and run["load_world_size"] == LOADED
    assert run["ranks_reported"] == LOADED and run["missing_rank_count"] == 0
    assert run["verified"] is True
    assert run["extra"]["settings"]["load_world_size"] == LOADED
    assert int(row["load_world_size"]) == LOADED
    tensors = _tensors()
    assert run["total_bytes"] == sum(t.nbytes for t in tensors)
    # The save's figures are the two saving ranks'; the two added ranks are counted as left out.
    save, load = run["save"], run["load"]
    assert save["ranks_left_out"] == LOADED - SAVED and len(save["rank_io_seconds"]) == SAVED
    assert save["slowest_rank"] < SAVED
    assert run["delete"]["ranks_left_out"] == LOADED - SAVED
    assert load["ranks_left_out"] == 0 and len(load["rank_io_seconds"]) == LOADED
    assert run["shard_bytes"] == models.rank_bytes(tensors, SAVED, 0)
    assert run["load_shard_bytes"] == models.rank_bytes(tensors, LOADED, 0)
    assert run["load_shard_bytes"] < run["shard_bytes"]


def test_two_ranks_save_and_four_load_resharded_on_file(tmp_path: Path) -> None:
    storage = tmp_path / "ckpt"
    stdout, run, row = _run(tmp_path, "--storage", str(storage))
    _check_summary(run, row)
    ranks = _rank_results(storage / run["extra"]["settings"]["run_id"] / "results")
    tensors = _tensors()
    for r in ranks:
        assert r.error is None and r.verified is True, r.error
        # Each of the four ranks read its own rows of the 4-rank mesh, every sample.
        assert r.load_bytes == models.rank_bytes(tensors, LOADED, r.rank), r.rank
        assert r.load is not None and len(r.load.seconds or []) == 2
        if r.rank < SAVED:
            assert r.bytes == models.rank_bytes(tensors, SAVED, r.rank)
            assert r.save is not None and len(r.save.seconds or []) == 2
            assert r.delete is not None
        else:  # outside the saving group: saved nothing, records no save and no delete
            assert r.bytes == 0 and r.save is None and r.delete is None
    # What the four read is the checkpoint: each sharded row once, each replicated item on all.
    replicated = sum(t.nbytes for t in tensors if not t.sharded)
    assert sum(r.load_bytes or 0 for r in ranks) == run["total_bytes"] + (LOADED - 1) * replicated

    # Per-rank figures: the rank's bytes over its own I/O seconds, saving ranks only for save.
    save_rates = [r.bytes / r.save.io.mean for r in ranks if r.save]
    load_rates = [(r.load_bytes or 0) / r.load.io.mean for r in ranks if r.load]
    assert len(save_rates) == SAVED and len(load_rates) == LOADED
    save, load = run["save"], run["load"]
    assert save["min_rank_throughput_bytes_per_second"] == pytest.approx(min(save_rates), rel=1e-9)
    assert save["median_rank_throughput_bytes_per_second"] == pytest.approx(
        statistics.median(save_rates), rel=1e-9
    )
    assert load["min_rank_throughput_bytes_per_second"] == pytest.approx(min(load_rates), rel=1e-9)
    assert "4/4" in stdout and "save ranks left out" in stdout


def test_an_async_save_runs_in_the_saving_ranks_own_group(tmp_path: Path) -> None:
    # 2 save in a thread, 3 load: the added rank has no saver, no stall and no save.
    _stdout, run, _row = _run(
        tmp_path, "--storage", str(tmp_path / "ckpt"), "--save-mode", "thread",
        "--load-world-size", "3",
    )  # fmt: skip
    assert run["verified"] is True and run["ranks_reported"] == 3
    save = run["save"]
    assert save["ranks_left_out"] == 1 and len(save["rank_io_seconds"]) == SAVED
    stall = save["stall"]
    assert stall is not None and len(stall["rank_seconds"]) == SAVED


def test_two_ranks_save_and_four_load_resharded_on_the_gcs_emulator(tmp_path: Path) -> None:
    _stdout, run, row = _run(tmp_path, "--backend", "gcs")
    _check_summary(run, row)


def test_a_rank_past_world_size_that_loads_a_wrong_row_fails_verification(tmp_path: Path) -> None:
    # One rank saves, two load: a bit flipped in the saved chunk's second half lies in the rows
    # rank 1, which saved nothing, loads; it must notice.
    fqn = "layers.0.feed_forward.w1.weight"
    config = small_config(
        str(tmp_path / "ckpt"), model="llama3-debug", layers=1, optimizer="none", world_size=1,
        load_world_size=2, sample_count=1, warmup_samples=0, collective_timeout_seconds=120,
    )  # fmt: skip
    command = [*workers.WORKER[:1], "-m", "tests.workers", "corrupt", "0", fqn]
    ranks = workers.run(config, tmp_path, command=command, timeout=180)
    assert [w.rank for w in ranks] == [0, 1]
    results = {w.rank: w.result for w in ranks}
    bad = results[1]
    assert bad.verified is False and bad.error is not None, workers.logs(ranks)
    assert bad.error.startswith(f"VerificationError: {fqn} on rank 1: {fqn}: "), bad.error
    assert results[0].verified is not False, workers.logs(ranks)
