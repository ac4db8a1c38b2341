"""Every private name of torch the project uses, in one place, checked at import.

torch.distributed.checkpoint (DCP) keeps its fsspec writer/reader, the per-item storage record,
the reader's transform helper and the item-size helper in private names, and its
``FileSystemWriter``/``FileSystemReader`` are reused here by swapping their file system. The gcs
reader also knows ``torch.save``'s format (an uncompressed zip whose ``data.pkl`` pickles
``torch._utils._rebuild_tensor_v2`` over a storage) to read a plain tensor's payload straight into
its destination. All of that was written against :data:`WRITTEN_FOR`; another torch version gets a
warning naming both versions, and a torch without one of these names fails at import saying which.
"""

from __future__ import annotations

import collections
import io
import logging
import pickle
import struct
import warnings
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, cast

import torch

from ckptbench.workload.contract.choices import Compression

WRITTEN_FOR = "2.13"


class TorchSeamError(ImportError):
    """A private torch name this project relies on is gone."""


def check_version(found: str = torch.__version__) -> str | None:
    """A warning text when ``found`` is not the torch this seam was written for, else None."""
    release = found.split("+", 1)[0]
    if release == WRITTEN_FOR or release.startswith(WRITTEN_FOR + "."):
        return None
    return (
        f"ckptbench's torch seam was written for torch {WRITTEN_FOR}.x, found {found}: the gcs "
        "reader's fast path and the DCP internals it reuses may behave differently"
    )


_mismatch = check_version()
if _mismatch is not None:
    warnings.warn(_mismatch, RuntimeWarning, stacklevel=2)

try:
    from torch.distributed._shard._utils import narrow_tensor_by_index
    from torch.distributed.checkpoint._extension import ZStandard
    from torch.distributed.checkpoint._fsspec_filesystem import (
        FileSystem as FsspecFileSystem,
    )
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

    # DCP's Hugging Face reader records where each tensor lies in these, and the writer keeps
    # each chunk's offsets in the file's header under these keys (storage/hf/object_store.py).
    from torch.distributed.checkpoint._hf_utils import (
        CUSTOM_METADATA_KEY as HF_SHARDING_KEY,
    )
    from torch.distributed.checkpoint._hf_utils import (
        DTYPE_MAP as HF_DTYPES,
    )
    from torch.distributed.checkpoint._hf_utils import (
        SAVED_OFFSETS_KEY as HF_OFFSETS_KEY,
    )
    from torch.distributed.checkpoint._hf_utils import (
        SUFFIX as HF_SUFFIX,
    )
    from torch.distributed.checkpoint._hf_utils import (
        _HFStorageInfo as HFStorageInfo,
    )
    from torch.distributed.checkpoint.filesystem import (
        _item_size as item_size,
    )
    from torch.distributed.checkpoint.filesystem import (
        _StorageInfo as StorageInfo,
    )
    from torch.distributed.checkpoint.filesystem import (
        _StorageReaderTransforms as StorageReaderTransforms,
    )
except ImportError as _exc:  # pragma: no cover - only on a torch without these names
    raise TorchSeamError(
        f"torch {torch.__version__} lacks a private name ckptbench (written for torch "
        f"{WRITTEN_FOR}) uses: {_exc}"
    ) from _exc

__all__ = [
    "HF_DTYPES", "HF_OFFSETS_KEY", "HF_SHARDING_KEY", "HF_SUFFIX", "FsspecFileSystem",
    "FsspecReader", "FsspecWriter", "HFStorageInfo", "StorageInfo", "StorageReaderTransforms",
    "TensorRecord", "extension_options", "item_size", "narrow_tensor_by_index",
    "parse_tensor_blob", "send_file_writes_to", "write_files",
]  # fmt: skip


def extension_options(compression: Compression) -> dict[str, Any]:
    """The keyword arguments that make a ``FileSystemWriter`` (or a subclass passing its keyword
    arguments on) transform every file it writes for ``compression``: its experimental
    ``_extensions``. None for no compression, so the writer is built exactly as without it.
    Readers need nothing: DCP records each file's transforms in ``.metadata``."""
    if compression is Compression.NONE:
        return {}
    if not ZStandard.is_available():
        raise RuntimeError(
            "compression zstd needs the zstandard package (pip install 'ckptbench[workload]')"
        )
    return {"_extensions": [ZStandard()]}


def use_filesystem(writer_or_reader: Any, fs: Any, path: str) -> None:
    """Point a ``FileSystemWriter``/``FileSystemReader`` at another ``FileSystemBase``: DCP
    annotates ``fs`` as its local file system but uses only the ``FileSystemBase`` interface
    (DCP's own fsspec writer swaps it the same way)."""
    writer_or_reader.fs = fs
    writer_or_reader.path = path


def reader_transforms(reader: Any) -> Any:
    """The ``FileSystemReader``'s transform helper (for extensions such as compression)."""
    return reader.transforms


def reader_storage_data(reader: Any) -> dict[Any, Any]:
    """Where each item lies: ``FileSystemReader`` fills this from ``.metadata``."""
    data: dict[Any, Any] = reader.storage_data
    return data


# -- DCP's writer threads -------------------------------------------------------------------------
# write_data queues the rank's files for ``_write_data``, whose threads write one at a time each.


def write_files(writer: Any, planner: Any, files: Any) -> Any:
    """The writer's class's own ``_write_data``: write the ``(path, name, items)`` of ``files``."""
    return type(writer)._write_data(writer, planner, files)


def send_file_writes_to(writer: Any, write: Callable[[Any, Any], Any]) -> None:
    """Have ``writer.write_data`` hand its planner and queue of files to ``write`` instead."""
    writer._write_data = write


# -- torch.save's format --------------------------------------------------------------------------

# The pickle names a tensor's storage by its legacy typed class; mapping names to dtypes here,
# rather than reading ``torch.FloatStorage.dtype``, keeps torch's "TypedStorage is deprecated"
# warning from reaching users.
_STORAGE_DTYPES: dict[str, torch.dtype] = {
    "DoubleStorage": torch.float64,
    "FloatStorage": torch.float32,
    "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16,
    "LongStorage": torch.int64,
    "IntStorage": torch.int32,
    "ShortStorage": torch.int16,
    "CharStorage": torch.int8,
    "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool,
    "ComplexFloatStorage": torch.complex64,
    "ComplexDoubleStorage": torch.complex128,
}

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
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(_STORAGE_DTYPES[name])
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


# -- DCP's process checkpointer ------------------------------------------------------------------
# dcp.async_save(..., async_checkpointer_type=PROCESS) starts one checkpointer process per rank
# process on its first save and keeps it in a private module global for the life of the process;
# torch offers no call to end it or to name it. The rank needs both: its peak memory is the
# rank's too, and a rank ends with os._exit, which skips the atexit hook that would stop it.


def checkpoint_process_pid() -> int | None:
    """The process id of DCP's checkpointer process, if this process started one."""
    from torch.distributed.checkpoint import _async_process_executor as executor

    process = getattr(executor, "_CHECKPOINT_PROCESS", None)
    if process is None:
        return None
    pid = process._save_process.pid
    return int(pid) if pid is not None else None


def stop_checkpoint_process(timeout: float = 10.0) -> None:
    """Ask DCP's checkpointer process to end, wait for it, and forget it (torch's own
    ``__del__`` does the same at garbage collection, which os._exit never reaches)."""
    from torch.distributed.checkpoint import _async_process_executor as executor

    process = getattr(executor, "_CHECKPOINT_PROCESS", None)
    if process is None:
        return
    executor._CHECKPOINT_PROCESS = None
    child = process._save_process
    try:
        if child.is_alive():
            process._send(executor._CheckpointSaveProcessControlOpts.TERMINATE)
            child.join(timeout=timeout)
    finally:
        if child.is_alive():
            child.terminate()
            child.join(timeout=timeout)


# torch 2.13.0: the checkpointer process's first act (``_checkpointing_subprocess``) is
# ``_init_logger(rank)`` (torch.distributed.checkpoint.logger): the ROOT logger set to INFO with a
# handler of its own on stderr, so every INFO record of every library in that process prints, and
# DCP's own say a dozen lines a save ("Waiting for checkpoint save request...", "Completed
# checkpoint save request ..."). It takes no argument, reads no variable, and logs on the root
# logger, not a named one that could be turned down. The executor looks the function up in its
# module's globals when the process starts, so a replacement set there before is the one it calls.


def replace_checkpointer_logger_init(init: Callable[[int], None]) -> None:
    """Have DCP's checkpointer process call ``init(rank)`` instead of configuring the root logger
    itself; to take effect, call it in that process before it starts serving (its main module's
    import, :mod:`ckptbench.workload.rank.process.checkpointer_log`)."""
    from torch.distributed.checkpoint import _async_process_executor as executor

    if not callable(getattr(executor, "_init_logger", None)):
        raise RuntimeError(
            "torch.distributed.checkpoint._async_process_executor has no _init_logger: "
            "written for torch 2.13.0, see torch_seam.py"
        )
    setattr(executor, "_init_logger", init)  # noqa: B010 (a private name, set on purpose)


# DCP's load, when the checkpoint's .metadata cannot be read, logs the failure with its traceback
# and tries a rank-local metadata file no ckptbench save writes, logging a second traceback; both
# on the root logger (state_dict_loader's ``logger = logging.getLogger()``), where only a filter
# on the root logger itself sees them. The reader names the failure (timing.MetadataUnreadable),
# so these two records, and only these, are dropped.
_FALLBACK_RECORDS = frozenset(
    ["Global metadata is not found. Falling back to rank local metadata.",
     "Rank local metadata is not found."]
)  # fmt: skip


def _not_a_fallback(record: logging.LogRecord) -> bool:
    return record.msg not in _FALLBACK_RECORDS


def quiet_metadata_fallback() -> None:
    """Drop DCP's two tracebacks of a metadata fallback (idempotent)."""
    root = logging.getLogger()
    if _not_a_fallback not in root.filters:
        root.addFilter(_not_a_fallback)
