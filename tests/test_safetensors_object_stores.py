"""Format safetensors on object stores, held on the real emulators (fake-gcs-server, moto).

Two facts of torch 2.13 first: DCP's Hugging Face writer sends its shards through any DCP file
system (here gcsfs's), but neither its reader (safetensors' ``safe_open``, a memory map of a local
path) nor its consolidation (``open()`` of the shards and of its output) reaches an object store.
When a torch release reads or consolidates through the file system, one of those cases fails:
the ranged reader (storage/hf/object_store.py) may then give way to torch's own.

Then what ckptbench does instead on gcsfs and s3fs: the writer's shards are the bytes it writes
on file, and the ranged reader loads them back exactly, fetching no byte twice; a byte flipped in
a stored shard fails the run's verification naming the tensor.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.hf_storage import (
    HuggingFaceStorageReader,
    HuggingFaceStorageWriter,
)
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.contract.names import EMULATOR_ENV
from ckptbench.workload.contract.storage_settings import ServiceSettings
from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.rank import loop
from ckptbench.workload.storage.hf import object_store
from ckptbench.workload.storage.retry import IntegrityError
from ckptbench.workload.storage.session import gcsfs_options, s3fs_options
from ckptbench.workload.storage.torch_seam import FsspecWriter, use_filesystem
from ckptbench.workload.storage.traffic import TRAFFIC
from tests.workers import one_rank

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


@pytest.fixture(params=["gcs", "s3"])
def store(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """A fresh bucket on either emulator: its URL and its fsspec options."""
    if request.param == "gcs":
        url: str = request.getfixturevalue("on_emulator")
        return url, gcsfs_options(ServiceSettings())
    bucket: str = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}", s3fs_options(ServiceSettings())


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


def _state() -> dict[str, torch.Tensor]:
    """Tensors of several dtypes and shapes, each distinct, so a wrong range reads other bytes."""
    return {
        "a": torch.arange(40, dtype=torch.float32).reshape(5, 8),
        "b": torch.arange(7, dtype=torch.int64) * -3,
        "c": torch.linspace(-2, 2, 12, dtype=torch.bfloat16).reshape(3, 4),
        "d": torch.tensor(2.5, dtype=torch.float64),
    }


def _only_object(fs: Any, url: str) -> str:
    (name,) = fs.ls(url, detail=False)
    assert str(name).endswith(".safetensors"), name
    return str(name)


def test_a_shard_on_an_object_store_holds_the_bytes_written_on_file(
    store: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    url, options = store
    dcp_save(_state(), storage_writer=object_store.writer(f"{url}/ckpt", options, False))
    dcp_save(
        _state(), storage_writer=HuggingFaceStorageWriter(str(tmp_path), save_distributed=True)
    )
    fs = fsspec.filesystem(url.split(":", 1)[0], **options)
    (local,) = tmp_path.glob("*.safetensors")
    remote, here = fs.cat_file(_only_object(fs, f"{url}/ckpt")), local.read_bytes()
    # safetensors orders the header's metadata map differently from one save to the next, on
    # file too: the header is compared as what it says, every other byte as it is.
    assert len(remote) == len(here) and remote[:8] == here[:8]
    assert _header(remote) == _header(here)
    assert remote[_data_start(remote) :] == here[_data_start(here) :]


def _data_start(blob: bytes | bytearray) -> int:
    return 8 + int(struct.unpack("<Q", blob[:8])[0])


def _header(blob: bytes | bytearray) -> Any:
    return json.loads(blob[8 : _data_start(blob)])


def test_the_ranged_reader_loads_every_tensor_back_reading_each_byte_once(
    store: tuple[str, dict[str, Any]],
) -> None:
    url, options = store
    path = f"{url}/ckpt"
    dcp_save(_state(), storage_writer=object_store.writer(path, options, False))
    fs = fsspec.filesystem(url.split(":", 1)[0], **options)
    stored = fs.size(_only_object(fs, path))
    loaded = {k: torch.zeros_like(v) for k, v in _state().items()}
    before = TRAFFIC.received
    dcp_load(loaded, storage_reader=object_store.RangedSafetensorsReader(path, fs))
    for key, want in _state().items():
        assert torch.equal(loaded[key], want), key
    # The header once, each tensor's bytes once: the object's size, no more.
    assert TRAFFIC.received - before == stored


def _flip_in(fs: Any, name: str, tensor: str) -> None:
    """Flip one bit in the middle of ``tensor``'s bytes in the stored object ``name``."""
    blob = bytearray(fs.cat_file(name))
    begin, end = _header(blob)[tensor]["data_offsets"]
    blob[_data_start(blob) + (begin + end) // 2] ^= 0x01
    fs.pipe_file(name, bytes(blob))


def test_a_byte_flipped_in_a_stored_shard_fails_verification_by_name(
    store: tuple[str, dict[str, Any]],
) -> None:
    url, options = store
    backend = "gcsfs" if url.startswith("gs://") else "s3fs"
    config = one_rank(
        Path("/unused"), checkpoint_path=f"{url}/run", backend=backend, format="safetensors"
    )
    fs = fsspec.filesystem(url.split(":", 1)[0], **options)

    def corrupt(sample: int, checkpoint_id: str) -> None:
        if sample == 1:
            _flip_in(fs, _only_object(fs, checkpoint_id), "dummy_tensor_2")

    result = loop.run(config, after_save=corrupt, log=lambda _: None)
    assert result.verified is False
    assert result.error is not None
    assert result.error.startswith("VerificationError: dummy_tensor_2 on rank 0: "), result.error


def _damaged(on_emulator: str, damage: Any) -> tuple[Any, str]:
    """A saved shard on the emulator, damaged by ``damage``: its file system and object name."""
    path = f"{on_emulator}/ckpt"
    options = gcsfs_options(ServiceSettings())
    dcp_save(_state(), storage_writer=object_store.writer(path, options, False))
    fs = fsspec.filesystem("gs", **options)
    name = _only_object(fs, path)
    fs.pipe_file(name, damage(fs.cat_file(name)))
    return fs, name


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (lambda blob: b"\xff" * 8 + blob[8:], "a header length of"),
        (lambda blob: blob[:8] + b"[" + blob[9:], "its safetensors header does not parse"),
    ],
    ids=["header-length", "header-json"],
)
def test_a_damaged_header_is_named_by_the_ranged_reader(
    on_emulator: str, damage: Any, named: str
) -> None:
    fs, name = _damaged(on_emulator, damage)
    reader = object_store.RangedSafetensorsReader(f"{on_emulator}/ckpt", fs)
    with pytest.raises(IntegrityError, match=named) as failed:
        reader.read_metadata()
    assert str(failed.value).startswith(name), failed.value


def test_a_truncated_shard_is_named_by_the_ranged_reader(on_emulator: str) -> None:
    fs, name = _damaged(on_emulator, lambda blob: blob[:-4])
    loaded = {k: torch.zeros_like(v) for k, v in _state().items()}
    reader = object_store.RangedSafetensorsReader(f"{on_emulator}/ckpt", fs)
    with pytest.raises(CheckpointException) as failed:
        dcp_load(loaded, storage_reader=reader)
    ((cause, _),) = failed.value.failures.values()
    assert isinstance(cause, IntegrityError), cause
    assert str(cause).startswith(name) and "truncated" in str(cause), cause
