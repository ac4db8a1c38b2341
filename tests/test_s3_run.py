"""``ckptbench run`` on S3: with no --storage an embedded S3 server is started and stopped; with
``--storage s3://...`` and the AWS variables it runs on that server and leaves only results/;
an unreachable endpoint or missing credentials are refused in seconds, before any rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckptbench.workload.local.emulator import free_port
from ckptbench.workload.local.s3_server import S3Server
from ckptbench.workload.storage.s3 import objects

pytestmark = pytest.mark.timeout(240)

SMALL = ["--layer-size", "300", "--padding-size", "4", "--samples", "1", "--warmup", "0"]


def ckptbench(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", *argv],
        capture_output=True,
        text=True,
        timeout=200,
        env=env,
    )


def test_no_storage_runs_s3_and_s3fs_on_an_embedded_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    out = tmp_path / "run.json"
    done = ckptbench("run", "--backend", "s3,s3fs", *SMALL, "--json", str(out), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    header = done.stdout.splitlines()[0].split()
    assert header == ["s3", "s3fs", "s3/s3fs"], done.stdout
    runs = json.loads(out.read_text())["runs"]
    assert [(r["cell"], r["verified"]) for r in runs] == [("s3", True), ("s3fs", True)], runs
    emulator = runs[0]["extra"]["settings"]["emulator"]
    assert emulator.startswith("http://127.0.0.1:"), emulator
    # Stopped after the run: its port answers no more.
    with pytest.raises(OSError):
        import urllib.request

        urllib.request.urlopen(emulator, timeout=2)


def test_a_server_named_by_aws_variables_keeps_only_results(s3_bucket: str) -> None:
    done = ckptbench("run", "--backend", "s3", "--storage", f"s3://{s3_bucket}/runs", *SMALL)
    assert done.returncode == 0, done.stderr[-3000:]
    names = objects.list_names(f"s3://{s3_bucket}/runs")
    assert names and all(n.split("/")[1] == "results" for n in names), names
    assert objects.unfinished_uploads(f"s3://{s3_bucket}/runs") == []


def test_the_reference_default_tensor_count_on_four_ranks(s3_bucket: str, tmp_path: Path) -> None:
    # The reference's 4000 tensors on 4 ranks (small ones: the count is what is tested).
    out = tmp_path / "run.json"
    done = ckptbench(
        "run",
        "--backend",
        "s3",
        "--storage",
        f"s3://{s3_bucket}/many",
        "--world-size",
        "4",
        "--padding-size",
        "4000",
        "--layer-size",
        "1",
        "--samples",
        "1",
        "--warmup",
        "0",
        "--json",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = json.loads(out.read_text())["runs"]
    assert run["verified"] is True and run["extra"]["settings"]["padding_size"] == 4000, run


def test_a_model_preset_on_s3_and_s3fs(s3_bucket: str, tmp_path: Path) -> None:
    # The other layout: DTensor shards of a Llama 3 preset with AdamW state, both backends.
    out = tmp_path / "run.json"
    done = ckptbench(
        "run",
        "--backend",
        "s3,s3fs",
        "--storage",
        f"s3://{s3_bucket}/model",
        "--model",
        "llama3-debug",
        "--layers",
        "1",
        "--vocab",
        "256",
        "--samples",
        "1",
        "--warmup",
        "0",
        "--json",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(out.read_text())["runs"]
    assert [(r["cell"], r["verified"]) for r in runs] == [("s3", True), ("s3fs", True)], runs


def test_an_unreachable_endpoint_is_refused_in_seconds_before_any_rank(s3_bucket: str) -> None:
    closed = free_port()
    started = time.monotonic()
    done = ckptbench(
        "run",
        "--backend",
        "s3",
        "--storage",
        f"s3://{s3_bucket}/x",
        "--s3-endpoint",
        f"http://127.0.0.1:{closed}",
        *SMALL,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert "--storage" in done.stderr and "cannot reach" in done.stderr, done.stderr
    assert "[rank" not in done.stderr, done.stderr
    assert elapsed < 20, elapsed  # the interpreter's start included


def test_missing_credentials_and_a_missing_bucket_are_refused_by_name(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {
        "AWS_ENDPOINT_URL": s3_server.url,
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    done = ckptbench("run", "--backend", "s3", "--storage", f"s3://{s3_bucket}/x", *SMALL, env=env)
    assert done.returncode == 2 and "no AWS credentials" in done.stderr, done.stderr
    done = ckptbench("run", "--backend", "s3fs", "--storage", "s3://no-such-bucket-here/x", *SMALL)
    assert done.returncode == 2, done.stderr
    assert "bucket 'no-such-bucket-here' does not exist" in done.stderr, done.stderr


def test_the_embedded_server_answers_until_stopped() -> None:
    import urllib.request

    with S3Server() as server:
        server.create_bucket("up-and-down")
        assert server.running
        url = server.url
        assert "up-and-down" in urllib.request.urlopen(url, timeout=5).read().decode()
    assert not server.running
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)
