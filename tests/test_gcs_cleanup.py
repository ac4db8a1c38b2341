"""A failed sample's cleanup is bounded in time even when the storage stops answering deletes."""

from __future__ import annotations

import time

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.storage.factory import open_session
from tests import workers
from tests.fault_proxy import FaultProxy, Rule

pytestmark = pytest.mark.timeout(120)


def test_discarding_a_failed_sample_stops_at_its_bound_and_names_what_is_left(
    gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = storage.Client(
        project="t",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": gcs_emulator.url},
    )
    cid = f"gs://{gcs_bucket}/run/checkpoints/ckpt_0.ckpt"
    for i in range(12):
        client.bucket(gcs_bucket).blob(
            f"run/checkpoints/ckpt_0.ckpt/__0_{i}.distcp"
        ).upload_from_string(b"x")
    # Every delete waits far longer than the bound before the server acts on it.
    proxy = FaultProxy(gcs_emulator.url, [Rule("delay", "DELETE", times=None, seconds=20.0)])
    with proxy.running():
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        session = open_session(workers.small_config(f"gs://{gcs_bucket}/run", backend="gcs"))
        started = time.monotonic()
        left = session.discard_failed([cid], rank=0, seconds=2.0)
        elapsed = time.monotonic() - started
        session.close()
    assert elapsed < 6.0, elapsed  # 12 deletes unbounded would take 12 x the per-delete deadline
    assert left is not None and left.startswith("12 object(s): "), left
    assert f"{cid}/__0_" in left, left
