"""Backend ``dataflux``: Google's connector (gcs-torch-dataflux) as a checkpoint backend, run for
real on fake-gcs-server behind the XML multipart shim (the connector uploads only that way).

A backend that fell back to our gcs writer would save on the bare emulator (ours composes there);
the connector's cannot, which the first test holds. Runs of ``ckptbench run --backend dataflux``
on the embedded emulator save, load and verify a sharded DCP checkpoint and a torch-save object,
and the responses the connector's client retried are counted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from google.resumable_media.common import InvalidResponse
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.contract.checkpoint import memory_plan, sizes
from ckptbench.workload.contract.names import EMULATOR_ENV
from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.local.loopback.xml_multipart import XmlMultipartShim
from ckptbench.workload.storage.dataflux import dataflux_seam
from ckptbench.workload.storage.dataflux.backend import files_per_rank
from ckptbench.workload.storage.session import open_session
from tests.fault_proxy import FaultProxy, Rule
from tests.test_dcp_files import Broken, FaultyFiles, in_worker_thread
from tests.test_formats import ENV, LAYER, PADDING, ROOT, SMALL, _run
from tests.workers import small_config

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("quiet_dcp")]


def _state() -> dict[str, torch.Tensor]:
    return {f"t{i}": torch.full((64, 1000), float(i)) for i in range(4)}


def _one_rank(bucket: str, **overrides: object) -> Any:
    return small_config(
        f"gs://{bucket}/ckpt", backend="dataflux", world_size=1, padding_size=4, **overrides
    )


def _round_trip(config: Any, cid: str) -> dict[str, torch.Tensor]:
    session = open_session(config)
    try:
        dcp_save(_state(), storage_writer=session.writer(cid))
        loaded = {k: torch.zeros_like(v) for k, v in _state().items()}
        dcp_load(loaded, storage_reader=session.reader(cid))
        return loaded
    finally:
        session.close()


def test_the_writer_is_the_connectors_and_needs_the_xml_multipart_upload(
    gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer_cls, reader_cls, _ = dataflux_seam.checkpoint_classes()
    monkeypatch.setenv(EMULATOR_ENV, gcs_emulator.url)
    config = _one_rank(gcs_bucket)
    session = open_session(config)
    try:
        assert isinstance(session.writer(f"gs://{gcs_bucket}/x"), writer_cls)
        assert isinstance(session.reader(f"gs://{gcs_bucket}/x"), reader_cls)
        # The bare emulator has no XML multipart upload: the connector's upload cannot start.
        with (
            pytest.raises(InvalidResponse, match="404"),
            session.object_stream(f"gs://{gcs_bucket}/bare/full.pt", "wb") as stream,
        ):
            torch.save(_state(), stream)
    finally:
        session.close()


def test_a_sharded_save_round_trips_through_the_shim(
    shim: XmlMultipartShim, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EMULATOR_ENV, shim.url)
    loaded = _round_trip(_one_rank(gcs_bucket, threads=2), f"gs://{gcs_bucket}/ckpt/a")
    assert all(torch.equal(loaded[k], v) for k, v in _state().items())
    assert shim.uploads_open == 0  # every upload was completed


def test_a_file_failing_in_a_writer_thread_fails_the_save(
    shim: XmlMultipartShim, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DCP alone loses it: the save returns and the load fails naming a tensor.
    monkeypatch.setenv(EMULATOR_ENV, shim.url)
    session = open_session(_one_rank(gcs_bucket, threads=2))
    try:
        writer = session.writer(f"gs://{gcs_bucket}/ckpt/lost")
        writer.fs = FaultyFiles(writer.fs, in_worker_thread(Broken("denied")))  # type: ignore[attr-defined]
        with pytest.raises(CheckpointException, match="denied"):
            dcp_save(_state(), storage_writer=writer)
    finally:
        session.close()


def test_the_files_a_rank_writes_are_never_more_than_its_tensors() -> None:
    config = small_config("gs://bucket/ckpt", backend="dataflux", threads=8, padding_size=6)
    assert files_per_rank(config) == 3  # 6 tensors over 2 ranks
    assert files_per_rank(config.model_copy(update={"threads": 2})) == 2


def test_retried_responses_are_counted(
    gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with XmlMultipartShim(gcs_emulator.url, timeout=60).running() as shim:
        rule = Rule("status", method="PUT", url_contains="partNumber", times=2, statuses=(503,))
        with FaultProxy(shim.url, [rule]).running() as proxy:
            monkeypatch.setenv(EMULATOR_ENV, proxy.url)
            config = _one_rank(gcs_bucket, threads=1)
            session = open_session(config)
            try:
                cid = f"gs://{gcs_bucket}/ckpt/faulty"
                dcp_save(_state(), storage_writer=session.writer(cid))
                message = session.report_retries("save")
            finally:
                session.close()
            assert rule.fired == 2
    assert message is not None and "2x HTTP 503" in message, message
    assert "gcs-torch-dataflux" in message


def test_ckptbench_run_verifies_sharded_dcp_and_torch_save_on_the_embedded_emulator(
    tmp_path: Path,
) -> None:
    runs = _run(tmp_path, "--emulator", "--backend", "dataflux", "--format", "dcp,torch-save")
    total = sizes.total_bytes(LAYER, PADDING)
    dcp_run, torch_save_run = runs
    for run in runs:
        extra = run["extra"]
        assert extra["settings"]["backend"] == "dataflux"
        assert extra["versions"]["gcs-torch-dataflux"] == dataflux_seam.WRITTEN_FOR
        # Every byte of the checkpoint went up and came back down: the load read it.
        assert run["resources"]["max_sent_bytes"] >= total / 2
        assert run["load"]["mean_seconds"] > 0
    assert dcp_run["extra"]["settings"]["format"] == "dcp"
    assert dcp_run["extra"]["checkpoint"]["metadata_bytes"] > 0
    facts = torch_save_run["extra"]["checkpoint"]
    assert torch_save_run["extra"]["settings"]["format"] == "torch-save"
    assert facts["objects"] == 1 and facts["metadata_bytes"] == 0, facts
    assert torch_save_run["resources"]["max_received_bytes"] >= total


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--format", "safetensors"], "--format: safetensors needs --backend file"),
        (["--save-mode", "process"], "--save-mode: process cannot run --backend dataflux"),
        (["--strategy", "replicated"], "--strategy: replicated cannot run --backend dataflux"),
    ],
)
def test_what_the_connector_cannot_do_is_refused_by_name(argv: list[str], said: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "run", *SMALL, "--samples", "1", "--emulator",
         "--backend", "dataflux", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env=ENV,
    )  # fmt: skip
    assert proc.returncode != 0
    assert said in proc.stderr, proc.stderr


def test_the_memory_plan_counts_the_files_the_connector_buffers_whole() -> None:
    config = small_config("gs://bucket/ckpt", backend="dataflux", padding_size=8)
    load = memory_plan.rank_load(config)
    # Every file (a torch-save object too) sits whole in a BytesIO until its upload, and is
    # downloaded whole before DCP reads from it.
    assert memory_plan.save_buffer_bytes(load) == load.shard_bytes > 0
    assert memory_plan.load_buffer_bytes(load) >= load.shard_bytes
