"""Formats and compression, run for real: ``format`` safetensors (DCP's Hugging Face writer; on
file DCP's reader and the coordinator's consolidation timed apart as the save's finish, on gcsfs
and s3fs each rank's file read back by ranged reads) and torch-save (one object from rank 0),
``compression`` zstd (DCP's ZStandard extension), each on every backend the libraries allow (file;
gcs and gcsfs on the real fake-gcs-server; s3 and s3fs on moto's server), and what the files on
disk hold, so a format that fell back to dcp, or a compression never applied, fails here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.choices import Format, Strategy
from tests.workers import small_config

ROOT = Path(__file__).resolve().parent.parent
ENV = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
LAYER, PADDING = 200, 4
SMALL = ["--world-size", "2", "--layer-size", str(LAYER), "--padding-size", str(PADDING),
         "--warmup", "0"]  # fmt: skip
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # the first bytes of every zstd frame (RFC 8878)


def _run(tmp_path: Path, *argv: str, samples: int = 1) -> list[dict[str, Any]]:
    out = tmp_path / "run.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "run", *SMALL, "--samples", str(samples), *argv,
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=280, env=ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs: list[dict[str, Any]] = json.loads(out.read_text())["runs"]
    for run in runs:
        assert run["verified"] is True, run["extra"]
    return runs


def _folders(root: Path) -> list[Path]:
    """The checkpoint folders a kept run left, in the order of their samples."""
    return sorted(p.parent for p in root.rglob("*") if p.is_file() and "results" not in p.parts)


def _checkpoint(root: Path, run_id: str) -> Path:
    found = sorted({p for p in _folders(root / run_id) if p.name != "sharded"})
    assert len(found) == 1, found
    return found[0]


@pytest.mark.timeout(300)
def test_safetensors_and_torch_save_on_file_write_what_they_name(tmp_path: Path) -> None:
    store = tmp_path / "ckpt"
    runs = _run(tmp_path, "--format", "safetensors,torch-save", "--keep", "--storage", str(store))
    safetensors_run, torch_save_run = runs
    assert [r["extra"]["settings"]["format"] for r in runs] == ["safetensors", "torch-save"]
    names = [f"dummy_tensor_{i}" for i in range(PADDING)]
    total = sizes.total_bytes(LAYER, PADDING)

    # safetensors: each rank's file under sharded/, consolidated into one file holding every
    # rank's tensors; no DCP data file, no .metadata.
    folder = _checkpoint(store, safetensors_run["extra"]["settings"]["run_id"])
    shards = sorted(p.name for p in (folder / "sharded").iterdir())
    assert len(shards) == 2 and all(n.endswith(".safetensors") for n in shards), shards
    (consolidated,) = sorted(folder.glob("*.safetensors"))
    with safe_open(str(consolidated), framework="pt") as f:
        assert sorted(f.keys()) == names
    assert not list(folder.rglob("*.distcp")) and not (folder / ".metadata").exists()
    # The consolidation is rank 0's finish, reported apart from the rest of the save.
    finish = safetensors_run["save"]["finish_mean_seconds"]
    assert finish is not None and 0 < finish < safetensors_run["save"]["mean_seconds"]
    # Storage holds the shards and the consolidated copy: twice the payload and headers.
    stored = safetensors_run["extra"]["checkpoint"]["stored_bytes"]
    assert 2 * total < stored < 2 * total + 64 * 1024, stored

    # torch-save: one torch.save object, from rank 0, holding the whole state.
    folder = _checkpoint(store, torch_save_run["extra"]["settings"]["run_id"])
    (only,) = [p for p in folder.iterdir()]
    assert only.name == "full.pt"
    whole = torch.load(only, weights_only=True)
    assert sorted(whole) == names
    assert torch_save_run["extra"]["checkpoint"]["objects"] == 1


@pytest.mark.timeout(300)
def test_zstd_compresses_every_data_file_on_file(tmp_path: Path) -> None:
    store = tmp_path / "ckpt"
    plain, zstd = _run(tmp_path, "--compression", "none,zstd", "--keep", "--storage", str(store))
    assert [r["extra"]["settings"]["compression"] for r in (plain, zstd)] == ["none", "zstd"]
    for run, compressed in ((plain, False), (zstd, True)):
        folder = _checkpoint(store, run["extra"]["settings"]["run_id"])
        data = sorted(folder.glob("*.distcp"))
        assert len(data) == 2, data
        # DCP's extension compresses each item's stream: every file starts with a zstd frame.
        assert all((p.read_bytes()[:4] == ZSTD_MAGIC) is compressed for p in data), data
    stored = [r["extra"]["checkpoint"]["stored_bytes"] for r in (plain, zstd)]
    ratio = zstd["extra"]["checkpoint"]["stored_bytes"] / zstd["total_bytes"]
    assert stored[1] < stored[0] and ratio < 0.95, (stored, ratio)
    # What it cost is in the figures every run reports beside it.
    assert zstd["resources"]["max_cpu_user_seconds"] > 0


def test_a_format_the_backend_cannot_take_is_refused_by_name_before_any_rank(
    tmp_path: Path,
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "run", *SMALL, "--samples", "1", "--emulator",
         "--backend", "gcs", "--format", "safetensors"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env=ENV,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "--format: safetensors needs --backend file, gcsfs or s3fs" in proc.stderr, proc.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "where", [["--emulator", "--backend", "gcsfs"], ["--backend", "s3fs"]], ids=["gcs", "s3"]
)
def test_safetensors_on_object_stores_is_each_ranks_file_read_by_ranges(
    tmp_path: Path, where: list[str]
) -> None:
    (run,) = _run(tmp_path, *where, "--format", "safetensors")
    assert run["extra"]["settings"]["format"] == "safetensors"
    total = sizes.total_bytes(LAYER, PADDING)
    facts = run["extra"]["checkpoint"]
    # Each rank's safetensors file as DCP's writer made it, no .metadata, no consolidated file.
    assert facts["objects"] == 2 and facts["metadata_bytes"] == 0, facts
    headers = facts["stored_bytes"] - total
    assert 0 < headers < 2048, facts
    # A rank fetched its own tensors' bytes and, as the coordinator, both headers: no more.
    assert run["resources"]["max_received_bytes"] == total // 2 + headers, run["resources"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "where", [["--emulator", "--backend", "gcs,gcsfs"], ["--backend", "s3,s3fs"]], ids=["gcs", "s3"]
)
def test_torch_save_on_object_stores_is_one_object(tmp_path: Path, where: list[str]) -> None:
    runs = _run(tmp_path, *where, "--format", "torch-save")
    assert [r["extra"]["settings"]["format"] for r in runs] == ["torch-save"] * 2
    total = sizes.total_bytes(LAYER, PADDING)
    for run in runs:
        facts = run["extra"]["checkpoint"]
        # One object of the payload and torch.save's framing, no .metadata: not DCP's layout.
        assert facts["objects"] == 1 and facts["metadata_bytes"] == 0, facts
        assert total < facts["stored_bytes"] < total * 1.01, facts
        # Rank 0 alone wrote it, all of it.
        assert run["resources"]["max_sent_bytes"] >= total


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "where", [["--emulator", "--backend", "gcs,gcsfs"], ["--backend", "s3,s3fs"]], ids=["gcs", "s3"]
)
def test_zstd_on_object_stores_stores_less(tmp_path: Path, where: list[str]) -> None:
    runs = _run(tmp_path, *where, "--compression", "zstd")
    total = sizes.total_bytes(LAYER, PADDING)
    for run in runs:
        assert run["extra"]["settings"]["compression"] == "zstd"
        stored = run["extra"]["checkpoint"]["stored_bytes"]
        # The synthetic content compresses to about 82%; uncompressed it is just above 100%.
        assert stored < 0.95 * total, (run["cell"], stored)


def test_strategy_full_records_the_torch_save_it_writes(tmp_path: Path) -> None:
    # strategy full has always saved one torch.save object: its result must not say dcp.
    full = small_config(str(tmp_path / "c"), strategy="full")
    assert full.format is Format.TORCH_SAVE and full.single_object
    sharded = small_config(str(tmp_path / "c"), format="torch-save")
    assert sharded.strategy is Strategy.SHARDED and sharded.single_object
    assert not small_config(str(tmp_path / "c")).single_object
