"""``ckptbench clean``: what dead runs left is removed, and what is not is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.cloud import storage

from ckptbench.cli import COMMANDS
from ckptbench.cli import main as ckptbench
from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.local.loopback.xml_multipart import XmlMultipartShim
from ckptbench.workload.storage.gcs.client import make_client
from ckptbench.workload.storage.gcs.multipart import XmlMultipartUpload, unfinished_uploads
from ckptbench.workload.storage.gcs.objects import GcsObjects
from tests.fault_proxy import FaultProxy, Rule

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def client(gcs_emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch) -> storage.Client:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.url)
    return make_client()


def test_clean_removes_a_dead_runs_objects_and_parts_under_the_prefix_only(
    client: storage.Client, gcs_bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = client.bucket(gcs_bucket)
    dead = [
        "runs/dead/checkpoints/ckpt_0.ckpt/__0_0.distcp.parts/abc-00000",
        "runs/dead/checkpoints/ckpt_0.ckpt/__0_0.distcp.parts/abc-00001",
        "runs/dead/checkpoints/ckpt_0.ckpt/.metadata",
    ]
    for name in [*dead, "runs/alive/results/summary.json", "runs/deadline/x"]:
        bucket.blob(name).upload_from_string(b"x")
    assert "clean" in COMMANDS
    assert ckptbench(["clean", "--dry-run", f"gs://{gcs_bucket}/runs/dead"]) == 0
    assert "3 object(s)" in capsys.readouterr().out
    assert len(list(client.list_blobs(gcs_bucket))) == 5
    assert ckptbench(["clean", f"gs://{gcs_bucket}/runs/dead/"]) == 0
    assert "deleted 3 object(s)" in capsys.readouterr().out
    assert sorted(b.name for b in client.list_blobs(gcs_bucket)) == [
        "runs/alive/results/summary.json",
        "runs/deadline/x",
    ]


def test_clean_refuses_a_whole_bucket_and_other_schemes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert ckptbench(["clean", "gs://some-bucket"]) == 2
    assert "whole bucket" in capsys.readouterr().err
    assert ckptbench(["clean", "gs://some-bucket/"]) == 2
    assert ckptbench(["clean", "azure://b/x"]) == 2


def test_clean_empties_a_local_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "run" / "checkpoints"  # a run's checkpoints folder
    (root / "ckpt_0.ckpt").mkdir(parents=True)
    (root / "ckpt_0.ckpt" / "__0_0.distcp").write_bytes(b"x")
    (root / "ckpt_0.ckpt" / ".metadata").write_bytes(b"x")
    assert ckptbench(["clean", f"file://{root}"]) == 0
    assert "deleted 2 object(s)" in capsys.readouterr().out
    assert root.is_dir() and not any(root.iterdir())  # emptied, never removed


def test_clean_names_what_it_could_not_delete(
    client: storage.Client,
    gcs_emulator: GcsEmulator,
    gcs_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bucket = client.bucket(gcs_bucket)
    for name in ("dead/results/rank-00000.json", "dead/results/summary.json"):
        bucket.blob(name).upload_from_string(b"x")
    # Deleting the summary is forbidden, every time.
    rule = Rule("status", method="DELETE", url_contains="summary.json", times=None, statuses=(403,))
    proxy = FaultProxy(gcs_emulator.url, [rule])
    with proxy.running():
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        assert ckptbench(["clean", f"gs://{gcs_bucket}/dead"]) == 1
    captured = capsys.readouterr()
    assert "deleted 1 object(s)" in captured.out
    assert "could not delete 1 object(s): results/summary.json (first error: GcsError" in (
        captured.err
    )
    assert "403" in captured.err
    assert [b.name for b in client.list_blobs(gcs_bucket)] == ["dead/results/summary.json"]


def test_clean_aborts_the_unfinished_multipart_uploads_under_the_prefix_only(
    shim: XmlMultipartShim, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    # A run killed mid-save under the multipart scheme: uploads begun, never completed.
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", shim.url)
    gcs = GcsObjects(make_client(), gcs_bucket)
    dead = [f"runs/dead/checkpoints/ckpt_{i}.ckpt/__0_0.distcp" for i in (3, 1, 2, 0, 4)]
    for name in [*dead, "runs/deadline/x", dead[0]]:  # two uploads of one name
        upload = XmlMultipartUpload(gcs, name)
        upload.initiate()
        upload.put_part(0, memoryview(b"part"))
    listed = unfinished_uploads(gcs, "runs/dead/", page_size=2)  # three pages
    assert listed is not None and [n for n, _ in listed] == sorted([*dead, dead[0]])
    assert ckptbench(["clean", "--dry-run", f"gs://{gcs_bucket}/runs/dead"]) == 0
    assert "6 unfinished multipart upload(s) would be aborted" in capsys.readouterr().out
    assert len(shim.open_in(gcs_bucket)) == 7
    assert ckptbench(["clean", f"gs://{gcs_bucket}/runs/dead"]) == 0
    assert "aborted 6 unfinished multipart upload(s)" in capsys.readouterr().out
    assert [key for key, _ in shim.open_in(gcs_bucket)] == ["runs/deadline/x"]


def test_an_emulator_without_the_xml_api_has_no_unfinished_uploads_to_list(
    client: storage.Client, gcs_bucket: str
) -> None:
    assert unfinished_uploads(GcsObjects(client, gcs_bucket), "runs/") is None


def test_clean_leaves_objects_outside_the_run_layout_and_refuses_a_prefix_of_none(
    client: storage.Client, gcs_bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = client.bucket(gcs_bucket)
    for name in ["runs/dead/checkpoints/ckpt_0.ckpt/.metadata", "runs/notes.txt",
                 "runs/dead/model.pt", "other/data.bin"]:  # fmt: skip
        bucket.blob(name).upload_from_string(b"x")
    assert ckptbench(["clean", f"gs://{gcs_bucket}/runs"]) == 0
    assert "deleted 1 object(s)" in capsys.readouterr().out
    assert ckptbench(["clean", f"gs://{gcs_bucket}/other"]) == 2
    assert "none of them ckptbench's run layout" in capsys.readouterr().err
    assert sorted(b.name for b in client.list_blobs(gcs_bucket)) == [
        "other/data.bin", "runs/dead/model.pt", "runs/notes.txt",
    ]  # fmt: skip
