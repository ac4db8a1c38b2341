"""MLPerf Storage v3.0: its four checkpointing models, their process counts and published sizes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ckptbench.workload.contract.checkpoint import models

ROOT = Path(__file__).resolve().parent.parent


def _sizes(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "sizes", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_four_models_and_their_closed_process_counts() -> None:
    processes = {p: m.processes for p, m in models.MLPERF_V3.items()}
    assert processes == {
        "llama3-8b": 8,
        "mlperf-llama3-70b": 64,
        "llama3-405b": 512,
        "mlperf-llama3-1t": 1024,
    }


@pytest.mark.parametrize(
    ("preset", "gib", "rank_gib"),
    [("llama3-8b", 104.7, 13.09), ("mlperf-llama3-70b", 911.2, 14.24),
     ("llama3-405b", 5291.7, 10.34)],
)  # fmt: skip
def test_sizes_mlperf_gives_the_published_size_and_rank_count(
    preset: str, gib: float, rank_gib: float
) -> None:
    proc = _sizes("--model", preset, "--mlperf", "--json")
    assert proc.returncode == 0, proc.stderr
    [out] = json.loads(proc.stdout)
    assert out["world_size"] == models.MLPERF_V3[preset].processes
    assert out["dtype"] == "mlperf"
    assert out["total_bytes"] / 2**30 == pytest.approx(gib, abs=0.05)
    assert out["largest_rank_bytes"] / 2**30 == pytest.approx(rank_gib, abs=0.005)
    assert out["mlperf_v3"]["computed_over_published"] == 1.0
    assert (
        f"{models.MLPERF_V3[preset].processes} processes"
        in _sizes("--model", preset, "--mlperf").stdout
    )


def test_the_1t_preset_is_mlperfs_yaml_and_says_it_is_short_of_the_published_18_tib() -> None:
    # configs/dlio/workload/llama3_1t.yaml: 128 layers, hidden 25872, 192 heads, 32 kv heads,
    # ffn 98304. At 14 B/param that is 15.05 TiB, not the 18 TiB published for v3.0: the
    # output shows both and their ratio rather than a preset fitted to the published figure.
    arch = models.architecture("mlperf-llama3-1t")
    assert (arch.n_layers, arch.dim, arch.n_heads, arch.n_kv_heads, arch.ffn_dim) == (
        128, 25872, 192, 32, 98304,
    )  # fmt: skip
    proc = _sizes("--model", "mlperf-llama3-1t", "--mlperf", "--json")
    assert proc.returncode == 0, proc.stderr
    [out] = json.loads(proc.stdout)
    assert out["world_size"] == 1024
    assert out["mlperf_v3"]["published_gib"] == 18 * 1024
    assert out["total_bytes"] == 14 * out["parameters"]
    assert out["mlperf_v3"]["computed_over_published"] == pytest.approx(0.836, abs=0.001)


def test_mlperf_refuses_a_model_mlperf_does_not_run() -> None:
    proc = _sizes("--model", "llama3-70b", "--mlperf")
    assert proc.returncode == 2
    assert "--mlperf: llama3-70b is none of MLPerf Storage v3.0's checkpointing models" in (
        proc.stderr
    )
