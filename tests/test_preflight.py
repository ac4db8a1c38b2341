"""The storage a run names is checked once, before any rank starts (issue 22).

Found: ``STORAGE_EMULATOR_HOST=http://127.0.0.1:9 ckptbench run --storage gs://b/p`` took 23 s to
fail, each rank logging 8 retry lines and then a table of dashes; without credentials the same
error printed once a rank.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from google.cloud import storage

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.names import EMULATOR_ENV
from ckptbench.workload.local import preflight
from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.local.s3_server import S3Server
from tests.fault_proxy import FaultProxy, Rule

RUN = ["run", "--layer-size", "10", "--padding-size", "2", "--samples", "1", "--world-size", "2"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(env: dict[str, str], *argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", *RUN, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    return proc, time.monotonic() - started


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (EMULATOR_ENV, "GOOGLE_APPLICATION_CREDENTIALS")
    }
    return {**env, **extra}


def test_an_unreachable_endpoint_fails_in_seconds_with_one_message() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    proc, seconds = _run(_env(**{EMULATOR_ENV: url}), "--storage", "gs://bkt/p")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"ckptbench run: error: --storage gs://bkt/p: cannot reach {url} within 10 s "
        "(ConnectionError)"
    ]
    assert seconds < 15  # interpreter start included; the ranks took 23 s to say it


def test_missing_credentials_are_said_once(tmp_path: Path) -> None:
    # No GCE metadata probe: nothing may leave this machine.
    env = _env(NO_GCE_CHECK="True", CLOUDSDK_CONFIG=str(tmp_path), HOME=str(tmp_path))
    proc, _ = _run(env, "--storage", "gs://bkt/p")
    assert proc.returncode == 2
    assert proc.stderr.count("no Google credentials") == 1, proc.stderr
    assert "[rank" not in proc.stderr  # no rank started


def test_a_missing_bucket_is_named(
    gcs_emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EMULATOR_ENV, gcs_emulator.url)
    with pytest.raises(preflight.PreflightError, match="bucket 'no-such-bkt' does not exist on"):
        preflight.check_gcs("gs://no-such-bkt/p", None)


def test_a_writable_bucket_passes_and_keeps_nothing(
    gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EMULATOR_ENV, gcs_emulator.url)
    preflight.check_gcs(f"gs://{gcs_bucket}/some/prefix", None)
    client = storage.Client(project="x", client_options={"api_endpoint": gcs_emulator.url})
    assert list(client.list_blobs(gcs_bucket)) == []


@pytest.mark.parametrize(
    "rule",
    [
        Rule("status", method="POST", statuses=(429,)),
        Rule("status", method="POST", statuses=(503,)),
        Rule("reset_request", method="POST"),
        # The write made it, its answer did not: the retry's 412 means the object is ours.
        Rule("reset_response", method="POST"),
        Rule("status", method="DELETE", statuses=(503,)),
    ],
    ids=["429-upload", "503-upload", "reset-upload", "reset-after-upload", "503-delete"],
)
def test_one_transient_fault_is_retried_and_nothing_stays(
    rule: Rule, gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = FaultProxy(gcs_emulator.url, [rule])
    with proxy.running():
        monkeypatch.setenv(EMULATOR_ENV, proxy.url)
        preflight.check_gcs(f"gs://{gcs_bucket}/p", None)
    assert rule.fired == 1, proxy.fired
    client = storage.Client(project="x", client_options={"api_endpoint": gcs_emulator.url})
    assert list(client.list_blobs(gcs_bucket)) == []


def test_a_delete_that_keeps_failing_names_the_object_it_left(
    gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rule = Rule("status", method="DELETE", statuses=(503,), times=None)
    proxy = FaultProxy(gcs_emulator.url, [rule])
    with proxy.running():
        monkeypatch.setenv(EMULATOR_ENV, proxy.url)
        with pytest.raises(preflight.PreflightError) as info:
            preflight.check_gcs(f"gs://{gcs_bucket}/p", None)
    assert rule.fired == preflight.PREFLIGHT_ATTEMPTS
    client = storage.Client(project="x", client_options={"api_endpoint": gcs_emulator.url})
    (left,) = list(client.list_blobs(gcs_bucket))
    assert left.name.startswith("p/.ckptbench-preflight-")
    assert str(info.value).endswith(
        f"; 1 object left under gs://{gcs_bucket}/p: remove it with "
        f"`ckptbench clean gs://{gcs_bucket}/p`"
    ), info.value
    # The command named removes it.
    env = {**os.environ, EMULATOR_ENV: gcs_emulator.url}
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "clean", f"gs://{gcs_bucket}/p"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert list(client.list_blobs(gcs_bucket)) == []


def test_a_refused_delete_says_so_and_names_the_object_it_left(
    gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Credentials that may write but not delete: a run would leave every checkpoint behind.
    rule = Rule("status", method="DELETE", statuses=(403,), times=None)
    proxy = FaultProxy(gcs_emulator.url, [rule])
    with proxy.running():
        monkeypatch.setenv(EMULATOR_ENV, proxy.url)
        with pytest.raises(preflight.PreflightError) as info:
            preflight.check_gcs(f"gs://{gcs_bucket}/p", None)
    text = str(info.value)
    assert "these credentials may not delete there" in text, text
    assert text.endswith(f"remove it with `ckptbench clean gs://{gcs_bucket}/p`"), text
    client = storage.Client(project="x", client_options={"api_endpoint": gcs_emulator.url})
    for blob in client.list_blobs(gcs_bucket):
        blob.delete()


# -- S3: the same check, the same retries --------------------------------------------------------


_S3 = WorkloadConfig(checkpoint_path="s3://any-bucket/p", backend="s3")


def _s3_names(bucket: str) -> list[str]:
    from ckptbench.workload.storage.s3 import objects

    return objects.list_names(f"s3://{bucket}/p")


@pytest.mark.parametrize(
    "rule",
    [
        Rule("status", method="PUT", statuses=(429,), s3_code="TooManyRequests"),
        Rule("status", method="PUT", statuses=(503,), s3_code="SlowDown"),
        Rule("reset_request", method="PUT"),
        Rule("reset_request", method="DELETE"),
        Rule("status", method="DELETE", statuses=(429,), s3_code="TooManyRequests"),
        Rule("status", method="DELETE", statuses=(503,), s3_code="SlowDown"),
    ],
    ids=["429-put", "503-put", "reset-put", "reset-delete", "429-delete", "503-delete"],
)
def test_s3_one_transient_fault_is_retried_and_nothing_stays(
    rule: Rule, s3_server: S3Server, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = FaultProxy(s3_server.url, [rule])
    with proxy.running():
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        preflight.check_s3(f"s3://{s3_bucket}/p", _S3)
    assert rule.fired == 1, proxy.fired
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.url)
    assert _s3_names(s3_bucket) == []


def test_s3_a_refused_delete_names_the_object_left_and_clean(
    s3_server: S3Server, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rule = Rule("status", method="DELETE", statuses=(403,), times=None, s3_code="AccessDenied")
    proxy = FaultProxy(s3_server.url, [rule])
    with proxy.running():
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        with pytest.raises(preflight.PreflightError) as info:
            preflight.check_s3(f"s3://{s3_bucket}/p", _S3)
    text = str(info.value)
    assert "these credentials may not delete there (AccessDenied)" in text, text
    assert text.endswith(
        f"; 1 object left under s3://{s3_bucket}/p: remove it with "
        f"`ckptbench clean s3://{s3_bucket}/p`"
    ), text
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.url)
    assert len(_s3_names(s3_bucket)) == 1
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "clean", f"s3://{s3_bucket}/p"],
        capture_output=True, text=True, timeout=60, env=os.environ.copy(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert _s3_names(s3_bucket) == []
