"""``ckptbench data`` as its users run it: real ranks (processes), real DataLoaders, the real
emulators (fake-gcs-server, moto's S3 server) and the readers' own libraries. Each run is checked
for what it claims: every sample verified, the figures recorded per cell, the dataset made once
and found again, a damaged sample refused by name, and nothing left behind but the dataset and
the results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ckptbench.workload.contract.data.layout import Manifest
from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.local.s3_server import S3Server
from tests.fault_proxy import FaultProxy, Rule

pytestmark = [pytest.mark.timeout(300)]

FIGURES = ("samples_per_second", "bytes_per_second", "accelerator_utilization", "verified")


def data(*args: str, env: dict[str, str] | None = None, timeout: float = 240
         ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "data", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def runs(path: Path) -> list[dict[str, Any]]:
    doc = json.loads(path.read_text())
    assert doc["schema"] == "ckptbench.data.results/v1"
    out: list[dict[str, Any]] = doc["runs"]
    return out


def test_the_default_run_needs_no_flag_and_prints_a_verified_table(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = data("--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "samples/s" in proc.stdout and "accelerator utilisation" in proc.stdout
    assert "verified                 yes" in proc.stdout
    (run,) = runs(out)
    assert run["settings"]["backend"] == "gcs" and run["settings"]["preset"] == "mlperf-resnet50"
    assert run["summary"]["verified"] is True
    assert run["summary"]["requests"] == run["summary"]["samples"]  # one GET a sample


def test_the_gcs_readers_run_side_by_side_each_cell_with_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = data("--backend", "dataflux,gcs,gcsfs", "--preset", "mlperf-cosmoflow", "--files", "8",
                "--sample-size", "256KiB", "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ratio to dataflux" in proc.stdout
    cells = runs(out)
    assert [c["settings"]["backend"] for c in cells] == ["dataflux", "gcs", "gcsfs"]
    for c in cells:
        assert all(c["summary"][k] is not None for k in FIGURES), c["summary"]
        assert c["summary"]["verified"] is True
        assert c["summary"]["samples"] == 8 and c["summary"]["bytes"] == 8 * 256 * 1024
        assert c["settings"]["sample_bytes"] == 256 * 1024 and c["settings"]["files"] == 8
    assert cells[0]["settings"]["dataflux_compose"] is True
    assert cells[0]["summary"]["listing_seconds"] is not None  # the connector lists the prefix
    assert cells[1]["summary"]["listing_seconds"] is None
    # The dataset is made by the first cell and found by the others.
    assert cells[0]["summary"]["prepare_seconds"] is not None
    assert cells[1]["summary"]["prepare_seconds"] is None


def test_the_s3_readers_run_both_datasets_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = data("--backend", "s3,s3fs", "--preset", "dataflux-100kib", "--files", "12",
                "--sharding", "sample,file", "--batch-size", "2", "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = runs(out)
    assert [(c["settings"]["backend"], c["settings"]["sharding"]) for c in cells] == [
        ("s3", "sample"), ("s3", "file"), ("s3fs", "sample"), ("s3fs", "file")
    ]  # fmt: skip
    for c in cells:
        assert c["summary"]["verified"] and c["summary"]["samples"] == 12, c["summary"]
        # A pure read (no emulated compute) keeps no accelerator busy: no utilisation is claimed.
        assert c["summary"]["accelerator_utilization"] is None


def test_npz_and_parquet_on_a_mounted_path_made_once_then_found(tmp_path: Path) -> None:
    store = tmp_path / "data"
    store.mkdir()
    out = tmp_path / "r.json"
    args = ("--storage", str(store), "--backend", "file", "--world-size", "1", "--json", str(out))
    npz = ("--preset", "mlperf-unet3d", "--files", "3", "--sample-size", "64KiB", "--epochs", "2",
           "--accelerators", "2")  # fmt: skip
    first = data(*args, *npz)
    assert first.returncode == 0, first.stderr[-3000:]
    (made,) = runs(out)
    again = data(*args, *npz)
    assert again.returncode == 0, again.stderr[-3000:]
    (found,) = runs(out)
    assert made["summary"]["prepare_seconds"] is not None
    assert found["summary"]["prepare_seconds"] is None
    # 3 samples dealt to 2 accelerators: DistributedSampler pads each epoch to 4, as in training.
    assert found["summary"]["samples"] == 8 and found["summary"]["verified"]
    assert len(found["summary"]["epoch_seconds"]) == 2
    manifest = Manifest.model_validate_json(
        (store / "datasets" / made["settings"]["dataset"] / "manifest.json").read_text()
    )
    assert (manifest.files, manifest.sample_bytes, manifest.format.value) == (3, 65536, "npz")
    # The rank's result beside the dataset: every accelerator's every wait is in its histogram.
    rank = json.loads((store / found["settings"]["run_id"] / "results" / "rank-00000.json")
                      .read_text())  # fmt: skip
    assert rank["accelerators"] == 2 and len(rank["au"]) == 2
    assert sum(n for _, n in rank["wait_histogram"]) == rank["batches"] == 4
    parquet = data(*args, "--preset", "fineweb-parquet", "--files", "2", "--samples-per-file",
                   "64", "--sharding", "file", "--batch-size", "16")  # fmt: skip
    assert parquet.returncode == 0, parquet.stderr[-3000:]
    (rows,) = runs(out)
    assert rows["summary"]["samples"] == 128 and rows["summary"]["verified"]
    assert rows["summary"]["requests"] == 2  # a whole file a request


def test_a_byte_flipped_in_the_store_fails_that_sample_by_name(tmp_path: Path) -> None:
    store = tmp_path / "data"
    store.mkdir()
    args = (
        "--storage",
        str(store),
        "--backend",
        "file",
        "--preset",
        "mlperf-cosmoflow",
        "--files",
        "4",
        "--sample-size",
        "4KiB",
        "--world-size",
        "1",
        "--no-shuffle",
    )
    assert data(*args).returncode == 0
    (folder,) = (store / "datasets").iterdir()
    victim = folder / "data" / "part-000000002.bin"
    raw = bytearray(victim.read_bytes())
    raw[3000] ^= 0x40
    victim.write_bytes(bytes(raw))
    proc = data(*args)
    assert proc.returncode == 1
    assert "sample 2: its bytes do not match its crc32c (corrupted)" in proc.stdout + proc.stderr


def test_a_manifest_of_another_dataset_is_refused_not_overwritten(tmp_path: Path) -> None:
    store = tmp_path / "data"
    store.mkdir()
    args = (
        "--storage",
        str(store),
        "--backend",
        "file",
        "--preset",
        "mlperf-cosmoflow",
        "--files",
        "2",
        "--sample-size",
        "4KiB",
        "--world-size",
        "1",
    )
    assert data(*args).returncode == 0
    (manifest,) = (store / "datasets").glob("*/manifest.json")
    doc = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**doc, "seed": 99}))
    proc = data(*args)
    assert proc.returncode == 1
    assert "describes another dataset" in proc.stdout + proc.stderr
    assert json.loads(manifest.read_text())["seed"] == 99


@pytest.fixture(scope="module")
def gcs() -> Any:
    with GcsEmulator() as emu:
        yield emu


def _gs_names(emu: GcsEmulator, bucket: str) -> list[str]:
    from google.cloud import storage

    os.environ.setdefault("STORAGE_EMULATOR_HOST", emu.url)
    client = storage.Client(project="test")
    return sorted(b.name for b in client.list_blobs(bucket))


@pytest.mark.parametrize("reader", ["dataflux", "gcs", "gcsfs"])
def test_gcs_readers_survive_503_429_and_resets_mid_body_and_leave_only_the_dataset(
    gcs: GcsEmulator, reader: str, tmp_path: Path
) -> None:
    bucket = f"faults-{reader}"
    gcs.create_bucket(bucket)
    rules = [
        Rule("status", "GET", "part-", times=3, statuses=(503, 429)),
        Rule("reset_response", "GET", "part-", times=2),
    ]
    base = (
        "--storage",
        f"gs://{bucket}/p",
        "--backend",
        reader,
        "--preset",
        "mlperf-cosmoflow",
        "--files",
        "8",
        "--sample-size",
        "256KiB",
        "--json",
        str(tmp_path / "r.json"),
    )
    made = data(*base, env={"STORAGE_EMULATOR_HOST": gcs.url})  # the dataset, no faults
    assert made.returncode == 0, made.stderr[-3000:]
    proxy = FaultProxy(gcs.url, rules, seed=3)
    with proxy.running():
        proc = data(*base, env={"STORAGE_EMULATOR_HOST": proxy.url})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {f for f, _, _ in proxy.fired} == {"status", "reset_response"}
    (run,) = runs(tmp_path / "r.json")
    assert run["summary"]["verified"] and run["summary"]["samples"] == 8
    if reader == "gcs":  # ckptbench's own reads: each failed attempt counted by cause
        assert sum(run["summary"]["retries"].values()) >= 3, run["summary"]["retries"]
    dataset = f"p/datasets/{run['settings']['dataset']}/"
    left = [n for n in _gs_names(gcs, bucket) if not n.startswith(dataset)
            and "/results/" not in n]  # fmt: skip
    assert left == []  # the connector's composed objects included


@pytest.fixture(scope="module")
def s3() -> Any:
    with S3Server() as server:
        yield server


@pytest.mark.parametrize("reader", ["s3", "s3fs"])
def test_s3_readers_survive_503_and_resets_mid_body(s3: S3Server, reader: str,
                                                    tmp_path: Path) -> None:  # fmt: skip
    bucket = f"faults-{reader}"
    s3.create_bucket(bucket)
    base = (
        "--storage",
        f"s3://{bucket}/p",
        "--backend",
        reader,
        "--preset",
        "mlperf-cosmoflow",
        "--files",
        "8",
        "--sample-size",
        "256KiB",
        "--json",
        str(tmp_path / "r.json"),
    )
    made = data(*base, env={**s3.env(), "AWS_ENDPOINT_URL": s3.url})
    assert made.returncode == 0, made.stderr[-3000:]
    rules = [
        Rule("status", "GET", "part-", times=3, statuses=(503,), s3_code="SlowDown"),
        Rule("reset_response", "GET", "part-", times=2),
    ]
    proxy = FaultProxy(s3.url, rules, seed=3)
    with proxy.running():
        proc = data(*base, env={**s3.env(), "AWS_ENDPOINT_URL": proxy.url})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {f for f, _, _ in proxy.fired} == {"status", "reset_response"}
    (run,) = runs(tmp_path / "r.json")
    assert run["summary"]["verified"] and run["summary"]["samples"] == 8


# S3MapDataset with the sequential reader, S3IterableDataset with the ranged one.
@pytest.mark.parametrize(("sharding", "reader"), [("sample", "sequential"), ("file", "ranged")])
def test_the_s3_reader_reads_again_an_object_its_client_gave_up_on_after_a_429(
    s3: S3Server, sharding: str, reader: str, tmp_path: Path
) -> None:
    # The CRT client retries a 429 only when its S3 code is SlowDown; a bare one would end the
    # run with the DataLoader worker's traceback.
    bucket = f"throttled-{sharding}"
    s3.create_bucket(bucket)
    base = ("--storage", f"s3://{bucket}/p", "--backend", "s3", "--sharding", sharding,
            "--s3-reader", reader,
            "--preset", "mlperf-cosmoflow", "--files", "8", "--sample-size", "256KiB",
            "--json", str(tmp_path / "r.json"))  # fmt: skip
    made = data(*base, env={**s3.env(), "AWS_ENDPOINT_URL": s3.url})
    assert made.returncode == 0, made.stderr[-3000:]
    rule = Rule("status", "GET", "part-", times=1, statuses=(429,))
    with FaultProxy(s3.url, [rule], seed=3).running() as proxy:
        proc = data(*base, env={**s3.env(), "AWS_ENDPOINT_URL": proxy.url})
    assert rule.fired == 1 and proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stderr.splitlines() if "which the client does not retry" in line]
    assert len(said) == 1 and "] read of s3://" in said[0] and "(HTTP 429" in said[0], said
    (run,) = runs(tmp_path / "r.json")
    assert run["summary"]["verified"] and run["summary"]["samples"] == 8


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ("--batch-size", "5000", "--sample-size", "64MiB", "--preset", "mlperf-cosmoflow"),
            "--world-size 2: a rank would hold about",
        ),
        (
            ("--backend", "file", "--storage", "gs://bkt/p"),
            "--backend file needs a local --storage",
        ),
        (("--preset", "fineweb-parquet", "--sharding", "sample"), "--sharding: must be file"),
        (("--backend", "s3", "--samples-per-file", "4"), "--backend: maps whole objects"),
        (("--workers", "-1"), "--workers"),
    ],
)
def test_a_run_that_cannot_work_is_refused_by_name_before_anything_starts(
    args: tuple[str, ...], says: str
) -> None:
    proc = data(*args, timeout=60)
    assert proc.returncode == 2
    assert says in proc.stderr, proc.stderr
    assert "[rank" not in proc.stderr


def test_clean_removes_a_dataset_by_its_manifest_and_nothing_else(tmp_path: Path) -> None:
    store = tmp_path / "data"
    store.mkdir()
    args = ("--storage", str(store), "--backend", "file", "--preset", "mlperf-cosmoflow",
            "--files", "3", "--sample-size", "4KiB", "--world-size", "1")  # fmt: skip
    assert data(*args).returncode == 0
    (folder,) = (store / "datasets").iterdir()
    stranger = folder / "data" / "notes.txt"
    stranger.write_text("not the dataset's")

    def clean(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ckptbench.cli", "clean", f"file://{folder}", *extra],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    dry = clean("--dry-run")
    assert dry.returncode == 0 and "4 object(s)" in dry.stdout
    assert len(list((folder / "data").iterdir())) == 4
    done = clean()
    assert done.returncode == 0, done.stderr
    assert "deleted 4 object(s)" in done.stdout
    assert [p.name for p in folder.rglob("*") if p.is_file()] == ["notes.txt"]
    again = clean()
    assert again.returncode == 2 and "no dataset manifest" in again.stderr
    assert stranger.exists()
