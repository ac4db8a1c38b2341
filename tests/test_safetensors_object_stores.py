"""Why ``format: safetensors`` is refused on object stores, held on the real emulator: with torch
2.13, DCP's Hugging Face writer sends its shards through any DCP file system (here gcsfs's), but
neither its reader (safetensors' ``safe_open``, a memory map of a local path) nor its
consolidation (``open()`` of the shards and of its output) reaches an object store. A checkpoint
that cannot be read back cannot be verified, so the run refuses it by name (the rule in
``state_settings.py``). When a torch release reads or consolidates through the file system, a
case below fails: lift the refusal then."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.hf_storage import (
    HuggingFaceStorageReader,
    HuggingFaceStorageWriter,
)
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.contract.names import EMULATOR_ENV
from ckptbench.workload.contract.storage_settings import ServiceSettings
from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.storage.session import gcsfs_options
from ckptbench.workload.storage.torch_seam import FsspecWriter, use_filesystem

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("quiet_dcp")]


def _fsspec(path: str) -> object:
    """gcsfs as DCP's fsspec writer holds it (a DCP file system)."""
    return FsspecWriter(path, **gcsfs_options(ServiceSettings())).fs


def _writer(path: str, consolidate: bool) -> HuggingFaceStorageWriter:
    writer = HuggingFaceStorageWriter(path, save_distributed=True, enable_consolidation=consolidate)
    # The writer built its paths as local ones (gs:/...): give it the object store's.
    use_filesystem(writer, _fsspec(path), f"{path}/sharded")
    writer.consolidated_output_path = path
    return writer


@pytest.fixture
def on_emulator(gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(EMULATOR_ENV, gcs_emulator.url)
    return f"gs://{gcs_bucket}"


def test_the_shards_write_through_gcsfs_but_do_not_read_back(on_emulator: str) -> None:
    path = f"{on_emulator}/plain"
    dcp_save({"a": torch.ones(4, 4)}, storage_writer=_writer(path, consolidate=False))
    fs = _fsspec(path)
    written = fs.ls(f"{path}/sharded")  # type: ignore[attr-defined]
    assert [str(p).rsplit("/", 1)[-1] for p in written] == [
        "shard-00001-model-00001-of-00001.safetensors"
    ]
    reader = HuggingFaceStorageReader(path)
    use_filesystem(reader, fs, f"{path}/sharded")
    # The listing went through gcsfs; safe_open then looks for a local file of that name.
    with pytest.raises(FileNotFoundError, match="shard-00001"):
        reader.read_metadata()


def test_the_consolidation_opens_local_files(on_emulator: str) -> None:
    path = f"{on_emulator}/consolidated"
    with pytest.raises(CheckpointException) as failed:
        dcp_save({"a": torch.ones(4, 4)}, storage_writer=_writer(path, consolidate=True))
    # The shards went up; the coordinator's consolidation then open()s its output as a local path.
    ((cause, frames),) = failed.value.failures.values()
    assert isinstance(cause, FileNotFoundError) and str(cause.filename).startswith("gs://"), cause
    assert frames[-1].name == "_write_metadata" and "consolidate" in frames[-1].filename
