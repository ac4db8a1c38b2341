"""Backends s3 and s3fs on 2 ranks through a loopback fault-injecting proxy in front of a real S3
server (moto's): 503 SlowDown on a fifth of all requests, a connection reset mid-body on an
upload (a whole object's PUT, and a part of a multipart upload), one on a download, on either
backend. Each is survived by the clients' retries, every load is verified, and nothing is left
under the prefix, unfinished multipart uploads included."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.local.s3_server import S3Server
from ckptbench.workload.storage.s3 import objects
from tests import workers
from tests.fault_proxy import FaultProxy, Rule

pytestmark = [pytest.mark.timeout(240)]


def two_ranks(bucket: str, backend: str, **overrides: object) -> WorkloadConfig:
    values: dict[str, object] = {
        "layer_size": 300,  # 1.2 MB tensors, two per rank: one PUT per rank's object
        "padding_size": 4,
        "sample_count": 1,
        "warmup_samples": 0,
        **overrides,
    }
    return workers.small_config(f"s3://{bucket}/faults", backend=backend, **values)


def slow_down() -> Rule:
    return Rule("status", times=None, probability=0.2, statuses=(503,), s3_code="SlowDown")


# A rank's object of 8 MB (two 4 MB tensors) goes up in 5 MiB parts, so a reset can cut a part
# of a multipart upload: s3 by its part size, s3fs by its block size (fsspec's configuration
# variable, as its users set it).
MULTIPART = {"layer_size": 1000, "s3_part_size_bytes": 5 * 1024 * 1024}
S3FS_MULTIPART_ENV = {"FSSPEC_S3_DEFAULT_BLOCK_SIZE": str(5 * 1024 * 1024)}
PART = "partNumber="

# What each rank's log must name (the client's own retries, counted per operation), or None where
# no layer says why: aiohttp resends an idempotent request once, silently, when a reused
# connection breaks under it (docs/storage.md).
CRT_RETRIED = "retried by the CRT client (s3torchconnector)"
S3FS_RETRIED = "retried by s3fs"
FAULTS = [
    pytest.param(
        "s3",
        slow_down(),
        {},
        {},
        (CRT_RETRIED, "HTTP 503: Response code indicates throttling"),
        id="s3-20pct-503-slowdown",
    ),
    pytest.param(
        "s3",
        Rule("reset_request", "PUT", ".distcp"),
        {},
        {},
        (CRT_RETRIED, "socket is closed"),
        id="s3-reset-mid-upload",
    ),
    pytest.param(
        "s3",
        Rule("reset_request", "PUT", PART),
        MULTIPART,
        {},
        (CRT_RETRIED, "socket is closed"),
        id="s3-reset-mid-upload-part",
    ),
    pytest.param(
        "s3",
        Rule("reset_response", "GET", ".distcp"),
        {},
        {},
        (CRT_RETRIED, "socket is closed"),
        id="s3-reset-mid-download",
    ),
    pytest.param(
        "s3fs",
        slow_down(),
        {},
        {},
        (S3FS_RETRIED, "HTTP 503 SlowDown"),
        id="s3fs-20pct-503-slowdown",
    ),
    pytest.param(
        "s3fs", Rule("reset_request", "PUT", ".distcp"), {}, {}, None, id="s3fs-reset-mid-upload"
    ),
    pytest.param(
        "s3fs",
        Rule("reset_request", "PUT", PART),
        MULTIPART,
        S3FS_MULTIPART_ENV,
        None,
        id="s3fs-reset-mid-upload-part",
    ),
    pytest.param(
        "s3fs",
        Rule("reset_response", "GET", ".distcp"),
        {},
        {},
        (S3FS_RETRIED, "ClientPayloadError (connection reset)"),
        id="s3fs-reset-mid-download",
    ),
]


@pytest.mark.parametrize(("backend", "rule", "overrides", "extra_env", "logged"), FAULTS)
def test_transient_faults_on_two_ranks_are_survived_and_leave_nothing(
    backend: str,
    rule: Rule,
    overrides: dict[str, object],
    extra_env: dict[str, str],
    logged: tuple[str, str] | None,
    s3_server: S3Server,
    s3_bucket: str,
    tmp_path: Path,
) -> None:
    proxy = FaultProxy(s3_server.url, [rule], seed=7)
    config = two_ranks(s3_bucket, backend, **overrides)
    with proxy.running():
        env = {**s3_server.env(), "AWS_ENDPOINT_URL": proxy.url, **extra_env}
        ranks = workers.run(config, tmp_path, extra_env=env, timeout=200)
    assert rule.fired >= 1, (proxy.fired, workers.logs(ranks))
    for w in ranks:
        assert w.proc.returncode == 0, workers.logs(ranks)
        assert w.result.error is None and w.result.verified is True, workers.logs(ranks)
    left = f"s3://{s3_bucket}/faults/run/checkpoints"
    assert objects.list_names(left) == []
    assert objects.unfinished_uploads(f"s3://{s3_bucket}/faults") == []
    if logged is not None:
        # One warning per operation that had retries, on the rank whose client made them.
        client, cause = logged
        lines = [line for w in ranks for line in w.stderr.splitlines() if client in line]
        assert lines, workers.logs(ranks)
        assert any(cause in line for line in lines), workers.logs(ranks)
        assert all(line.startswith("[rank ") and " of s3://" in line for line in lines), lines


@pytest.mark.parametrize("backend", ["s3", "s3fs"])
def test_a_failed_sample_deletes_its_objects(
    backend: str, s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    # Rank 1's data object vanishes after the save: its load fails on every rank, and the sample
    # must still leave nothing behind (rank 0's objects, the .metadata, unfinished uploads).
    config = two_ranks(s3_bucket, backend)
    command = [*workers.WORKER[:1], "-m", "tests.workers", "delete", "1"]
    ranks = workers.run(config, tmp_path, command=command, extra_env=s3_server.env())
    assert [w.proc.returncode for w in ranks] == [1, 1], workers.logs(ranks)
    for w in ranks:
        assert "load failed on rank 1" in (w.result.error or ""), workers.logs(ranks)
        assert w.result.left_behind is None, workers.logs(ranks)
    assert objects.list_names(f"s3://{s3_bucket}/faults/run/checkpoints") == []
    assert objects.unfinished_uploads(f"s3://{s3_bucket}/faults") == []
