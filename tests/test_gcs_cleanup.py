"""A failed sample's cleanup is bounded in time even when the storage stops answering deletes:
the deletion of its objects and an aborted upload's deletion of its parts."""

from __future__ import annotations

import threading
import time

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.storage.gcs.backend import Upload
from ckptbench.workload.storage.session import open_session
from tests import workers
from tests.fault_proxy import FaultProxy, Rule

pytestmark = pytest.mark.timeout(120)
MiB = 1 << 20


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
        discarded = session.discard_failed([cid], rank=0, seconds=2.0)
        left = discarded.text if discarded is not None else None
        elapsed = time.monotonic() - started
        session.close()
    assert elapsed < 6.0, elapsed  # 12 deletes unbounded would take 12 x the per-delete deadline
    assert left is not None and left.startswith("12 object(s): "), left
    assert f"{cid}/__0_" in left, left


def _upload_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("gcs-upload")]


def test_an_aborted_upload_stops_deleting_its_parts_at_the_bound_and_the_rest_is_reported(
    gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = f"gs://{gcs_bucket}/run/checkpoints/ckpt_0.ckpt"
    bound = 2.0
    # Deletes are answered 20 s late; the ordinary policy (900 s deadline, 8 attempts of 5 s)
    # would hold the failed rank for minutes. Eight parts on two threads: even deletes bounded
    # one by one (1 s each) would pass the bound without the bound on the whole.
    proxy = FaultProxy(gcs_emulator.url, [Rule("delay", "DELETE", times=None, seconds=20.0)])
    with proxy.running():
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        config = workers.small_config(
            f"gs://{gcs_bucket}/run",
            backend="gcs",
            threads=2,
            part_size_bytes=MiB,
            stall_seconds=5.0,
        )
        session = open_session(config)
        fs = session.filesystem
        assert fs.policy.deadline_seconds == 900.0  # what the parts would be deleted under
        fs.discard_seconds = bound
        before = set(_upload_threads())
        with (
            pytest.raises(RuntimeError, match="the save failed"),
            fs.uploading(Upload(expected_bytes=8 * MiB)),
            fs.create_stream(f"{cid}/__0_0.distcp", "wb") as stream,
        ):
            stream.write(bytes(8 * MiB))  # 8 parts sent (and waited for: nobody pins them)
            started = time.monotonic()
            raise RuntimeError("the save failed")
        elapsed = time.monotonic() - started
        # The deletes still running end within their own (discard) deadline, not the request's.
        deadline = time.monotonic() + bound * 2
        while set(_upload_threads()) - before and time.monotonic() < deadline:
            time.sleep(0.05)
        lingering = set(_upload_threads()) - before
        fired = list(proxy.fired)
        discarded = session.discard_failed([cid], rank=0, seconds=bound)
        left = discarded.text if discarded is not None else None
        session.close()
    assert elapsed < bound + 1.5, elapsed
    assert not lingering, lingering
    assert any(method == "DELETE" and ".parts" in url for _, method, url in fired), fired
    assert left is not None and "__0_0.distcp.parts/" in left, left
