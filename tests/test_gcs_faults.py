"""The gcs backend on 2 ranks through a loopback fault-injecting proxy in front of a real
fake-gcs-server: every transient fault survived, a permanent one fails in time naming the object,
nothing left behind, corruption rejected in flight and detected at rest."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import pytest
import torch
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.storage.gcs.backend import GcsStorageReader, GcsStorageWriter
from ckptbench.workload.storage.gcs.client import make_client
from tests import workers
from tests.fault_proxy import FaultProxy, Rule

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("quiet_dcp")]

DOWNLOAD = "alt=media"
UPLOAD = "uploadType=media"


def two_ranks(bucket: str, **overrides: object) -> WorkloadConfig:
    values: dict[str, object] = {
        "backend": "gcs",
        "layer_size": 300,  # 1.2 MB tensors: two per rank, each over one 1 MiB part
        "padding_size": 4,
        "sample_count": 1,
        "warmup_samples": 0,
        "part_size_bytes": 1 << 20,
        "threads": 4,
        "stall_seconds": 2.0,
        "request_deadline_seconds": 30.0,
    }
    values.update(overrides)
    return workers.small_config(f"gs://{bucket}/faults", **values)


def checkpoint_names(emulator: GcsEmulator, bucket: str) -> list[str]:
    """What is left under the run's checkpoints, asked of the emulator directly."""
    client = storage.Client(
        project="t",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": emulator.url},
    )
    return sorted(b.name for b in client.list_blobs(bucket, prefix="faults/run/checkpoints/"))


def run_through(proxy: FaultProxy, config: WorkloadConfig, tmp_path: Path) -> list[workers.Worker]:
    with proxy.running():
        return workers.run(config, tmp_path, emulator_url=proxy.url, timeout=150)


@pytest.mark.parametrize(
    ("rule", "retried_because"),
    [
        pytest.param(
            Rule("reset_response", "GET", DOWNLOAD), "Connection broken", id="reset-download"
        ),
        pytest.param(Rule("reset_request", "POST", UPLOAD), "Connection", id="reset-upload"),
        pytest.param(Rule("status", times=None, probability=0.2), "HTTP 5", id="20pct-503-429"),
        pytest.param(
            # Silent far longer than the test may run: only the no-progress limit (2 s) ends it.
            Rule("stall_response", "GET", ".distcp?alt=media", seconds=600.0),
            "timed out",
            id="stall-longer-than-limit",
        ),
        pytest.param(
            Rule("corrupt_request", "POST", ".parts%2F"),
            "corrupted in flight",
            id="part-corrupted-in-flight",
        ),
    ],
)
def test_transient_faults_on_two_ranks_are_survived(
    rule: Rule, retried_because: str, gcs_emulator: GcsEmulator, gcs_bucket: str, tmp_path: Path
) -> None:
    proxy = FaultProxy(gcs_emulator.url, [rule], seed=7)
    ranks = run_through(proxy, two_ranks(gcs_bucket), tmp_path)
    assert rule.fired >= 1, proxy.fired
    # The fault took effect and was seen as what it is: the retry it caused names its cause.
    retries = [line for w in ranks for line in w.stderr.splitlines() if "retrying in" in line]
    assert any(retried_because in line for line in retries), workers.logs(ranks)
    for w in ranks:
        assert w.proc.returncode == 0, workers.logs(ranks)
        assert w.result.error is None and w.result.verified is True, workers.logs(ranks)
    assert checkpoint_names(gcs_emulator, gcs_bucket) == []


def test_a_permanent_stall_fails_within_the_deadline_naming_the_object_and_leaves_nothing(
    gcs_emulator: GcsEmulator, gcs_bucket: str, tmp_path: Path
) -> None:
    # Every read of rank 1's data object stalls mid-body; deletes still go through.
    rule = Rule(
        "stall_response", method="GET", url_contains="__1_0.distcp", times=None, seconds=600.0
    )
    proxy = FaultProxy(gcs_emulator.url, [rule])
    config = two_ranks(gcs_bucket, stall_seconds=1.0, request_deadline_seconds=6.0)
    started = time.monotonic()
    ranks = run_through(proxy, config, tmp_path)
    elapsed = time.monotonic() - started
    error = ranks[1].result.error or ""
    assert f"gs://{gcs_bucket}/faults/run/checkpoints/ckpt_0.ckpt/__1_0.distcp" in error, error
    assert "deadline reached" in error and "attempts" in error, error
    assert "timed out" in error, error  # the stall, not some other fault, ended each attempt
    assert ranks[1].proc.returncode != 0 and ranks[0].proc.returncode != 0
    assert elapsed < 60, elapsed  # a deadline of 6 s per read, not 6 x 300 s
    assert checkpoint_names(gcs_emulator, gcs_bucket) == []
    assert all(w.result.left_behind is None for w in ranks)


def test_an_object_corrupted_at_rest_is_detected_on_read_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with GcsEmulator(root=tmp_path / "emu") as emulator, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        emulator.create_bucket("rest")
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.url)
        make_client()
        sd = {"w": torch.rand(600, 1000), "b": torch.rand(100)}
        cid = "gs://rest/x/ckpt.ckpt"
        dcp_save(sd, storage_writer=GcsStorageWriter(cid, threads=2, part_size_bytes=1 << 20))
        stored = [
            p
            for p in (tmp_path / "emu" / "data").rglob("*")
            if p.is_file() and "__0_0.distcp" in p.name
        ]
        assert len(stored) == 1, stored
        data = bytearray(stored[0].read_bytes())
        data[len(data) // 2] ^= 0x01  # one bit inside the big tensor's payload
        stored[0].write_bytes(bytes(data))
        out = {k: torch.empty_like(v) for k, v in sd.items()}
        reader = GcsStorageReader(cid, threads=2, part_size_bytes=1 << 20)
        with pytest.raises(CheckpointException) as info:
            dcp_load(out, storage_reader=reader)
        text = str(info.value)
        assert "gs://rest/x/ckpt.ckpt/__0_0.distcp" in text and "corrupted" in text, text
