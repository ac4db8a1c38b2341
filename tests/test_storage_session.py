"""One storage session per rank: one client, made before timing, reused; seams and paths."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.names import EMULATOR_ENV
from ckptbench.workload.contract.results.rank import RankResult
from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.storage import session as storage_session
from ckptbench.workload.storage import torch_seam
from ckptbench.workload.storage.file.paths import local_path
from ckptbench.workload.storage.gcs import google_seam

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("quiet_dcp")]


def config(path: str, **extra: object) -> WorkloadConfig:
    values: dict[str, object] = {
        "checkpoint_path": path,
        "world_size": 1,
        "layer_size": 300,
        "padding_size": 4,
    }
    values.update(extra)
    return WorkloadConfig.model_validate(values)


def test_gcs_session_makes_one_client_and_counts_read_paths(
    gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EMULATOR_ENV, gcs_emulator.url)
    session = storage_session.open_session(config(f"gs://{gcs_bucket}/s", part_size_bytes=1 << 20))
    assert session.setup_seconds > 0
    sd = {"big": torch.rand(600, 1000), "small": torch.arange(10.0)}
    for sample in range(2):
        cid = f"gs://{gcs_bucket}/s/ckpt_{sample}"
        writer = session.writer(cid)
        reader = session.reader(cid)
        # Every writer and reader shares the session's one file system and client.
        assert writer.gcs is session.filesystem  # type: ignore[attr-defined]
        assert reader.gcs is session.filesystem  # type: ignore[attr-defined]
        dcp_save(sd, storage_writer=writer)
        out = {k: torch.empty_like(v) for k, v in sd.items()}
        dcp_load(out, storage_reader=reader)
        assert all(torch.equal(out[k], sd[k]) for k in sd)
    assert session.read_paths == {
        "direct": 2,
        "scattered": 0,
        "copied": 2,
        "generic": 0,
        "bytes": 0,
        "checked": 2,
        "unchecked": 0,
        "mismatched": 0,
    }
    session.close()


def test_gcs_session_fails_at_setup_naming_a_missing_bucket(
    gcs_emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EMULATOR_ENV, gcs_emulator.url)
    with pytest.raises(Exception, match="no-such-bucket-ckptbench"):
        storage_session.open_session(config("gs://no-such-bucket-ckptbench/x"))


def test_gcsfs_runs_as_the_reference_runs_it_unless_asked(
    gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EMULATOR_ENV, gcs_emulator.url)
    fair = storage_session.open_session(config(f"gs://{gcs_bucket}/f", backend="gcsfs"))
    writer = fair.writer(f"gs://{gcs_bucket}/f/ckpt_0")
    assert writer.sync_files is False  # type: ignore[attr-defined]
    # fsspec hands the writer the session's instance: one client, authenticated at setup.
    assert writer.fs.fs is fair.filesystem  # type: ignore[attr-defined]
    handicapped = storage_session.open_session(
        config(f"gs://{gcs_bucket}/f", backend="gcsfs", sync_files=True)
    )
    assert handicapped.writer(f"gs://{gcs_bucket}/f/ckpt_1").sync_files is True  # type: ignore[attr-defined]
    env = config(f"gs://{gcs_bucket}/f", backend="gcsfs", sync_files=True).to_env()
    assert env["CKPTBENCH_SYNC_FILES"] == "true"
    assert WorkloadConfig.from_env(env).sync_files is True


def test_file_session_has_no_client(tmp_path: Path) -> None:
    session = storage_session.open_session(config(f"file://{tmp_path}", backend="file"))
    assert session.filesystem is None and session.read_paths is None
    writer = session.writer(f"file://{tmp_path}/ckpt")
    dcp_save({"a": torch.ones(3)}, storage_writer=writer)
    assert (tmp_path / "ckpt" / ".metadata").exists()


def test_rank_result_carries_setup_and_read_paths_compactly() -> None:
    result = RankResult(rank=0, setup_seconds=0.25, read_paths={"direct": 3, "generic": 1})
    text = result.to_termination_message()
    assert '"setup_seconds":0.25' in text
    assert '"read_paths":{"direct":3,"generic":1}' in text
    assert RankResult.from_termination_message(text) == result


def test_one_local_path_rule() -> None:
    assert local_path("file:///a/b") == Path("/a/b")
    assert local_path("/a/b") == Path("/a/b")
    assert local_path("file://~/x") == Path.home() / "x"
    with pytest.raises(ValueError, match="no path"):
        local_path("file://")


@pytest.mark.parametrize("seam", [torch_seam, google_seam])
def test_seams_name_the_expected_and_found_versions_on_a_mismatch(seam: object) -> None:
    written_for = seam.WRITTEN_FOR  # type: ignore[attr-defined]
    check = seam.check_version  # type: ignore[attr-defined]
    assert check(written_for + ".0") is None
    assert check(written_for + ".1+cpu") is None
    message = check("99.1.0")
    assert message is not None
    assert written_for in message and "99.1.0" in message


def test_the_loop_makes_one_client_for_every_sample_and_reports_it(
    gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckptbench.workload.rank import loop
    from ckptbench.workload.storage.gcs import client as gcs_client

    monkeypatch.setenv(EMULATOR_ENV, gcs_emulator.url)
    made: list[object] = []
    original = gcs_client.make_client

    def counting(*args: object, **kwargs: object) -> object:
        made.append(1)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gcs_client, "make_client", counting)
    cfg = config(f"gs://{gcs_bucket}/loop", sample_count=2, warmup_samples=1, termination_log="")
    result = loop.run(cfg, log=lambda _: None)
    assert result.error is None and result.verified is True
    assert len(made) == 1
    assert result.setup_seconds is not None and result.setup_seconds > 0
    # Four 1.2 MB tensors in each of three samples, each read straight into its tensor, and
    # each sample's one data object checked whole against its crc32c.
    assert result.read_paths == {"direct": 4 * 3, "checked": 3}


def test_installed_versions_are_the_ones_the_seams_were_written_for() -> None:
    assert torch_seam.check_version() is None
    assert google_seam.check_version() is None


@pytest.mark.parametrize("keep", [0.5, 0.0], ids=["half", "empty"])
def test_gcsfs_names_a_truncated_shard_instead_of_a_bare_eof(
    keep: float, gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.cloud import storage as gcs
    from torch.distributed.checkpoint.api import CheckpointException

    from ckptbench.workload.storage.gcs.client import make_client

    monkeypatch.setenv(EMULATOR_ENV, gcs_emulator.url)
    session = storage_session.open_session(config(f"gs://{gcs_bucket}/g", backend="gcsfs"))
    cid = f"gs://{gcs_bucket}/g/ckpt_0"
    sd = {"t": torch.rand(100, 100)}
    dcp_save(sd, storage_writer=session.writer(cid))
    blob: gcs.Blob = make_client().bucket(gcs_bucket).blob("g/ckpt_0/__0_0.distcp")
    data = blob.download_as_bytes()
    blob.upload_from_string(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointException) as info:
        dcp_load({"t": torch.empty(100, 100)}, storage_reader=session.reader(cid))
    text = str(info.value)
    assert f"{cid}: a data file is truncated or corrupted" in text, text
    assert "weights_only" not in text
