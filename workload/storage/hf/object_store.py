"""Format safetensors on an object store, through the backend's fsspec file system.

DCP's Hugging Face writer already sends each rank's shard through any DCP file system, so the
save is torch's own (the same ``safetensors.torch.save`` bytes as on ``file``) over gcsfs or s3fs.
Its reader cannot follow: torch 2.13 opens every shard with safetensors' ``safe_open``, a memory
map of a local path, and its consolidation ``open()``s local files. :class:`RangedSafetensorsReader`
keeps the reader's planning and replaces only the file access, as an object-store safetensors
reader does: a shard is an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and byte range, then the raw bytes; the coordinator fetches each header with two
ranged GETs, and every rank fetches each tensor it needs with one ranged GET of exactly its bytes.
There is no consolidation here (it needs local files): each rank's shard is the checkpoint.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.checkpoint.hf_storage import (
    HuggingFaceStorageReader,
    HuggingFaceStorageWriter,
)
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner
from torch.futures import Future

from ckptbench.workload.storage.retry import IntegrityError
from ckptbench.workload.storage.torch_seam import (
    HF_DTYPES,
    HF_OFFSETS_KEY,
    HF_SHARDING_KEY,
    HF_SUFFIX,
    FsspecFileSystem,
    HFStorageInfo,
    use_filesystem,
)
from ckptbench.workload.storage.traffic import TRAFFIC, count_traffic

HEADER_LENGTH_BYTES = 8  # safetensors: the header's length, a little-endian u64
# safetensors refuses headers over 100 MB; a larger length means the first bytes are damaged.
MAX_HEADER_BYTES = 100_000_000
EXTRA_KEY = "__metadata__"


def writer(
    checkpoint_id: str, options: dict[str, Any], sync_files: bool
) -> HuggingFaceStorageWriter:
    """DCP's Hugging Face writer saving each rank's shard to ``checkpoint_id`` through DCP's
    fsspec file system made with ``options`` (gcsfs's or s3fs's), without consolidation, its
    bytes counted."""
    out = HuggingFaceStorageWriter(checkpoint_id, save_distributed=True)
    out.sync_files = sync_files
    fs = FsspecFileSystem()
    fs.init_path(checkpoint_id, **options)
    use_filesystem(out, fs, checkpoint_id)
    return count_traffic(out)


@dataclass
class RangedStorageInfo(HFStorageInfo):
    """Where one saved chunk lies in its shard: ``start`` and ``length`` in bytes from the start
    of the object. The coordinator reads them from the header; DCP sends them to every rank with
    the metadata."""

    start: int = 0
    length: int = 0


@dataclass(frozen=True)
class _Entry:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int
    length: int
    offsets: tuple[int, ...]


class RangedSafetensorsReader(HuggingFaceStorageReader):
    """DCP's Hugging Face reader, its shards fetched by ranged reads through ``fs`` (an fsspec
    file system: gcsfs or s3fs) instead of memory-mapped from local paths."""

    def __init__(self, checkpoint_id: str, fs: Any) -> None:
        super().__init__(checkpoint_id)
        self._url = checkpoint_id
        self._store = fs

    def _fetch(self, name: str, start: int, length: int) -> bytes:
        data: bytes = self._store.cat_file(name, start=start, end=start + length)
        TRAFFIC.add_received(len(data))
        if len(data) != length:
            raise IntegrityError(
                f"{name}: asked for bytes {start}-{start + length}, the object returned "
                f"{len(data)}: it is truncated or its header is damaged"
            )
        return data

    def _entries(self, name: str) -> list[_Entry]:
        (size,) = struct.unpack("<Q", self._fetch(name, 0, HEADER_LENGTH_BYTES))
        if size > MAX_HEADER_BYTES:
            raise IntegrityError(f"{name}: a header length of {size} bytes: the file is damaged")
        try:
            header = json.loads(self._fetch(name, HEADER_LENGTH_BYTES, size))
            extra = header.pop(EXTRA_KEY, None) or {}
            sharding = json.loads(extra[HF_SHARDING_KEY]) if HF_SHARDING_KEY in extra else {}
            base = HEADER_LENGTH_BYTES + size
            entries = []
            for key, item in header.items():
                begin, end = item["data_offsets"]
                shape = tuple(int(n) for n in item["shape"])
                offsets = sharding[key][HF_OFFSETS_KEY] if key in sharding else [0] * len(shape)
                entries.append(
                    _Entry(key, HF_DTYPES[item["dtype"]], shape, base + begin, end - begin,
                           tuple(offsets))
                )  # fmt: skip
        except (ValueError, KeyError, TypeError) as exc:
            raise IntegrityError(
                f"{name}: its safetensors header does not parse ({type(exc).__name__}: {exc})"
            ) from None
        return entries

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """What DCP's reader builds from ``safe_open`` of each shard, built from the headers."""
        tensors: dict[str, TensorStorageMetadata] = {}
        storage_data: dict[MetadataIndex, RangedStorageInfo] = {}
        names = sorted(n for n in self._store.ls(self._url, detail=False) if n.endswith(HF_SUFFIX))
        for name in names:
            for e in self._entries(name):
                chunk = ChunkStorageMetadata(torch.Size(e.offsets), torch.Size(e.shape))
                ends = [o + s for o, s in zip(e.offsets, e.shape, strict=True)]
                if e.name in tensors:
                    known = tensors[e.name]
                    known.chunks.append(chunk)
                    sizes = zip(known.size, ends, strict=True)
                    known.size = torch.Size(max(a, b) for a, b in sizes)
                else:
                    tensors[e.name] = TensorStorageMetadata(
                        TensorProperties(dtype=e.dtype), torch.Size(ends), [chunk]
                    )
                storage_data[MetadataIndex(fqn=e.name, offset=list(e.offsets))] = RangedStorageInfo(
                    name, torch.Size(e.shape), e.dtype, start=e.start, length=e.length
                )
        metadata = Metadata(state_dict_metadata=dict(tensors), storage_data=storage_data)
        metadata.storage_meta = StorageMeta(load_id=self.load_id)
        return metadata

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        for req in plan.items:
            info: RangedStorageInfo = self.storage_data[req.storage_index]
            if info.length:
                raw = bytearray(self._fetch(info.relative_path, info.start, info.length))
                stored = torch.frombuffer(raw, dtype=info.dtype).reshape(info.shape)
            else:  # frombuffer takes no empty buffer
                stored = torch.empty(info.shape, dtype=info.dtype)
            wanted = tuple(
                slice(o, o + n) for o, n in zip(req.storage_offsets, req.lengths, strict=True)
            )
            tensor = stored[wanted]
            target = planner.resolve_tensor(req).detach()
            if target.size() != tensor.size():
                raise IntegrityError(
                    f"{info.relative_path}: {req.storage_index.fqn} holds {tuple(tensor.size())}, "
                    f"the plan wants {tuple(target.size())}"
                )
            target.copy_(tensor)
            planner.commit_tensor(req, target)
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut
