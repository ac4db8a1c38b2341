"""Parallel ranged reads of DCP data objects, straight into the destination tensors.

DCP's file layout stores each tensor as a ``torch.save`` blob (an uncompressed zip) at
(offset, length) inside the rank's object. DCP's own reader ``torch.load``s each blob into a
fresh tensor and copies it into the destination: a second copy of every tensor. Here a large
tensor's blob header is read first (a few hundred bytes: zip local headers and the pickled
tensor layout), and when the stored tensor is plainly the destination's shape, dtype and a
contiguous storage, its payload is fetched in ``part_size`` ranges by parallel workers directly
into the destination's memory. Anything else (small tensors, transforms, views, other dtypes)
takes DCP's generic path, with small neighbouring items coalesced into one ranged read.
"""

from __future__ import annotations

import collections
import ctypes
import io
import pickle
import struct
import zipfile
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, as_completed, wait
from dataclasses import dataclass
from typing import IO, Any, cast

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.filesystem import _StorageInfo, _StorageReaderTransforms
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlanner, ReadItem

from ckptbench.workload.storage.gcs.objects import GcsObjects

# Enough for the zip records before a tensor's payload (the pickled layout among them), and
# for the records and central directory after it.
HEAD_BYTES = 16 * 1024
TAIL_BYTES = 16 * 1024
# Tensors at least this large are read straight into their destination after a look at the
# blob's ends (two small requests); smaller ones are coalesced with their neighbours.
DIRECT_MIN_BYTES = 1 << 20

_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
_LOCAL_SIG = 0x04034B50


@dataclass(frozen=True)
class TensorRecord:
    """Where a ``torch.save``d tensor's payload sits in its blob, and its stored layout."""

    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    storage_numel: int
    data_offset: int
    data_length: int

    def is_dense(self) -> bool:
        """True when the payload is exactly the tensor's elements in row-major order."""
        numel = 1
        for s in self.size:
            numel *= s
        expected = _contiguous_strides(self.size)
        # A dimension of size 1 may carry any stride without changing the byte order.
        strides_ok = len(self.stride) == len(self.size) and all(
            st == e for sz, st, e in zip(self.size, self.stride, expected, strict=True) if sz != 1
        )
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        return (
            self.storage_offset == 0
            and strides_ok
            and self.storage_numel == numel
            and self.data_length == numel * itemsize
        )


def _contiguous_strides(size: Sequence[int]) -> list[int]:
    strides: list[int] = []
    acc = 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(s, 1)
    return list(reversed(strides))


class _NotPlain(Exception):
    """The blob holds something other than one plain tensor: use the generic path."""


@dataclass(frozen=True)
class _StorageRef:
    dtype: torch.dtype
    key: str
    numel: int


@dataclass(frozen=True)
class _StorageType:
    dtype: torch.dtype


@dataclass(frozen=True)
class _Rebuilt:
    storage: _StorageRef
    storage_offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor_v2(
    storage: Any, storage_offset: Any, size: Any, stride: Any, *_rest: Any
) -> _Rebuilt:
    if not isinstance(storage, _StorageRef):
        raise _NotPlain("tensor without a storage reference")
    return _Rebuilt(storage, int(storage_offset), tuple(size), tuple(stride))


class _LayoutUnpickler(pickle.Unpickler):
    """Reads a tensor's layout from ``data.pkl`` without building the tensor. It resolves only
    the three globals a plain tensor pickle uses, so it never runs arbitrary code."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor_v2
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name.endswith("Storage"):
            cls = getattr(torch, name, None)
            dtype = getattr(cls, "dtype", None)
            if isinstance(dtype, torch.dtype):
                return _StorageType(dtype)
        raise _NotPlain(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        if (
            isinstance(pid, tuple)
            and len(pid) == 5
            and pid[0] == "storage"
            and isinstance(pid[1], _StorageType)
        ):
            return _StorageRef(pid[1].dtype, str(pid[2]), int(pid[4]))
        raise _NotPlain(f"persistent id {pid!r}")


class _SparseBlob(io.RawIOBase):
    """A blob of which only the head and the tail were fetched: enough for ``zipfile`` to read
    the central directory (at the end) and the small records before the payload. Reading
    anywhere else means the layout is not the expected one."""

    def __init__(
        self,
        head: bytes | bytearray | memoryview,
        tail: bytes | bytearray | memoryview,
        length: int,
    ) -> None:
        super().__init__()
        self._head = bytes(head)
        self._tail = bytes(tail)
        self._tail_start = length - len(tail)
        self._length = length
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._length}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        end = self._length if size is None or size < 0 else min(self._length, self._pos + size)
        start = self._pos
        if end <= start:
            return b""
        if end <= len(self._head):
            out = self._head[start:end]
        elif start >= self._tail_start:
            out = self._tail[start - self._tail_start : end - self._tail_start]
        else:
            raise _NotPlain(f"bytes {start}-{end} are neither in the head nor the tail")
        self._pos = end
        return out


def _local_data_start(head: bytes, header_offset: int) -> int:
    if header_offset + _LOCAL_HEADER.size > len(head):
        raise _NotPlain("local header beyond the fetched head")
    fields = _LOCAL_HEADER.unpack_from(head, header_offset)
    if fields[0] != _LOCAL_SIG:
        raise _NotPlain("no local header where the central directory points")
    name_len, extra_len = int(fields[9]), int(fields[10])
    return header_offset + _LOCAL_HEADER.size + name_len + extra_len


def parse_tensor_blob(
    head: bytes | bytearray | memoryview, tail: bytes | bytearray | memoryview, length: int
) -> TensorRecord | None:
    """Where a ``torch.save``d plain tensor's payload lies in its blob of ``length`` bytes,
    and its stored layout, from the blob's first and last bytes. None when they do not show
    one plain, uncompressed tensor: the caller then takes the generic path.

    ``torch.save`` writes zip records with trailing data descriptors (local headers carry no
    sizes), so sizes and offsets come from the central directory at the blob's end.
    """
    try:
        blob = _SparseBlob(head, tail, length)
        with zipfile.ZipFile(cast(IO[bytes], blob)) as archive:
            infos = {i.filename: i for i in archive.infolist()}
            pkl = [n for n in infos if n.endswith("/data.pkl")]
            if len(pkl) != 1:
                return None
            rebuilt = _LayoutUnpickler(io.BytesIO(archive.read(pkl[0]))).load()
        if not isinstance(rebuilt, _Rebuilt):
            return None
        payload = infos.get(f"{pkl[0][: -len('data.pkl')]}data/{rebuilt.storage.key}")
        if payload is None or payload.compress_type != zipfile.ZIP_STORED:
            return None
        data_offset = _local_data_start(bytes(head), payload.header_offset)
    except (
        _NotPlain,
        zipfile.BadZipFile,
        pickle.UnpicklingError,
        struct.error,
        EOFError,
        ValueError,
        TypeError,
        KeyError,
        OSError,
    ):
        return None
    return TensorRecord(
        dtype=rebuilt.storage.dtype,
        size=rebuilt.size,
        stride=rebuilt.stride,
        storage_offset=rebuilt.storage_offset,
        storage_numel=rebuilt.storage.numel,
        data_offset=data_offset,
        data_length=payload.file_size,
    )


def tensor_memory(t: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor's memory (numpy is not required)."""
    if t.device.type != "cpu" or not t.is_contiguous():
        raise ValueError("tensor_memory needs a contiguous CPU tensor")
    nbytes = t.numel() * t.element_size()
    if nbytes == 0:
        return memoryview(bytearray())
    array = (ctypes.c_ubyte * nbytes).from_address(t.data_ptr())
    return memoryview(array).cast("B")


@dataclass
class _Item:
    req: ReadItem
    info: _StorageInfo
    target: torch.Tensor | None  # None for BYTE_IO


def _fits_directly(item: _Item, record: TensorRecord) -> bool:
    target = item.target
    if target is None or not record.is_dense():
        return False
    return (
        target.device.type == "cpu"
        and target.is_contiguous()
        and target.dtype == record.dtype
        and tuple(target.shape) == record.size
        and all(o == 0 for o in item.req.storage_offsets)
        and tuple(item.req.lengths) == record.size
    )


class ParallelReader:
    """Executes one rank's load plan with ``threads`` workers."""

    def __init__(
        self,
        objects: GcsObjects,
        object_name: Callable[[str], str],
        *,
        threads: int,
        part_size: int,
        transforms: _StorageReaderTransforms,
    ) -> None:
        self._objects = objects
        self._object_name = object_name
        self._threads = threads
        self._part_size = part_size
        self._transforms = transforms

    def read(
        self,
        reqs: Sequence[ReadItem],
        storage_data: dict[Any, _StorageInfo],
        planner: LoadPlanner,
    ) -> None:
        items: list[_Item] = []
        for req in reqs:
            info = storage_data[req.storage_index]
            target = (
                planner.resolve_tensor(req).detach() if req.type != LoadItemType.BYTE_IO else None
            )
            items.append(_Item(req, info, target))

        direct = [
            i
            for i in items
            if i.target is not None
            and not i.info.transform_descriptors
            and i.info.length >= min(self._part_size, DIRECT_MIN_BYTES)
        ]
        direct_ids = {id(i) for i in direct}
        small = [i for i in items if id(i) not in direct_ids]

        loaded_bytes: list[tuple[ReadItem, bytes]] = []
        with ThreadPoolExecutor(self._threads, thread_name_prefix="gcs-read") as pool:
            futures: list[Future[Any]] = []
            try:
                for group in self._coalesce(small):
                    futures.append(pool.submit(self._read_group, group))
                heads = {pool.submit(self._read_ends, i): i for i in direct}
                futures.extend(heads)
                for fut in as_completed(heads):
                    item = heads[fut]
                    head, tail = fut.result()
                    record = parse_tensor_blob(head, tail, item.info.length)
                    if record is not None and _fits_directly(item, record):
                        futures.extend(self._submit_direct(pool, item, record))
                    else:
                        futures.append(pool.submit(self._read_group, [item]))
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                for fut in done:
                    fut.result()
                for fut in futures:
                    result = fut.result()
                    if isinstance(result, list):
                        loaded_bytes.extend(result)
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise

        # The planner is not documented as thread-safe: talk to it from this thread only.
        for req, data in loaded_bytes:
            planner.load_bytes(req, io.BytesIO(data))
        for item in items:
            if item.target is not None:
                planner.commit_tensor(item.req, item.target)

    def _coalesce(self, items: list[_Item]) -> list[list[_Item]]:
        """Group items of one object that lie back to back into reads of ~part_size."""
        by_object: dict[str, list[_Item]] = {}
        for item in items:
            by_object.setdefault(item.info.relative_path, []).append(item)
        groups: list[list[_Item]] = []
        for members in by_object.values():
            members.sort(key=lambda i: i.info.offset)
            current: list[_Item] = []
            for item in members:
                if current:
                    start = current[0].info.offset
                    last = current[-1].info
                    contiguous = item.info.offset == last.offset + last.length
                    span = item.info.offset + item.info.length - start
                    if not contiguous or span > self._part_size:
                        groups.append(current)
                        current = []
                current.append(item)
            if current:
                groups.append(current)
        return groups

    def _read_group(self, group: list[_Item]) -> list[tuple[ReadItem, bytes]]:
        start = group[0].info.offset
        end = group[-1].info.offset + group[-1].info.length
        buf = self._objects.read_range(
            self._object_name(group[0].info.relative_path), start, end - start
        )
        view = memoryview(buf)
        out: list[tuple[ReadItem, bytes]] = []
        for item in group:
            lo = item.info.offset - start
            blob = view[lo : lo + item.info.length]
            if self._copy_payload(item, blob):
                continue
            raw = cast(IO[bytes], io.BytesIO(blob))
            stream = self._transforms.transform_load_stream(
                item.req, item.info.transform_descriptors or (), raw
            )
            if item.target is None:
                out.append((item.req, stream.read()))
                continue
            seekable = stream if stream.seekable() else io.BytesIO(stream.read())
            loaded = torch.load(seekable, map_location="cpu", weights_only=True)
            if not isinstance(loaded, torch.Tensor):
                raise TypeError(
                    f"{self._objects.url(self._object_name(item.info.relative_path))} at "
                    f"offset {item.info.offset}: expected a tensor, found {type(loaded).__name__}"
                )
            loaded = narrow_tensor_by_index(loaded, item.req.storage_offsets, item.req.lengths)
            if item.target.size() != loaded.size():
                raise ValueError(
                    f"{item.req.storage_index}: stored size {tuple(loaded.size())} does not "
                    f"match the destination's {tuple(item.target.size())}"
                )
            item.target.copy_(loaded)
        return out

    @staticmethod
    def _copy_payload(item: _Item, blob: memoryview) -> bool:
        """Copy a plain tensor's payload from its fetched blob into the destination, skipping
        torch.load's intermediate tensor. False when the generic path is needed."""
        if item.target is None or item.info.transform_descriptors:
            return False
        n = blob.nbytes
        record = parse_tensor_blob(blob[: min(n, HEAD_BYTES)], blob[max(0, n - TAIL_BYTES) :], n)
        if record is None or not _fits_directly(item, record):
            return False
        dest = tensor_memory(item.target)
        dest[:] = blob[record.data_offset : record.data_offset + record.data_length]
        return True

    def _read_ends(self, item: _Item) -> tuple[bytearray, bytearray]:
        name = self._object_name(item.info.relative_path)
        off, length = item.info.offset, item.info.length
        head = self._objects.read_range(name, off, min(HEAD_BYTES, length))
        tail_len = min(TAIL_BYTES, length)
        tail = self._objects.read_range(name, off + length - tail_len, tail_len)
        return head, tail

    def _submit_direct(
        self, pool: ThreadPoolExecutor, item: _Item, record: TensorRecord
    ) -> list[Future[None]]:
        assert item.target is not None
        dest = tensor_memory(item.target)
        name = self._object_name(item.info.relative_path)
        base = item.info.offset + record.data_offset
        step = self._part_size
        return [
            pool.submit(
                self._objects.read_range_into,
                name,
                base + lo,
                dest[lo : min(lo + step, dest.nbytes)],
            )
            for lo in range(0, dest.nbytes, step)
        ]
