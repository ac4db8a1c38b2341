"""The ``file`` backend's file system: DCP's own, except that a write that fails names its cause.

``torch.save`` writes through a C++ zip writer that drops the ``OSError`` of a full disk and
raises ``RuntimeError: ... unexpected pos 704 vs 598`` instead, which says neither that the disk
is full nor where. Here every file a save writes goes through a raw file that keeps the first
error of its writes; when the file's writing fails, whatever torch raised, what leaves is that
error naming its path: for a full disk (ENOSPC, or EDQUOT for a quota) a :class:`DiskFull` that
also says how many bytes the checkpoint needs and how many were free.
"""

from __future__ import annotations

import errno
import io
import os
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemWriter
from torch.distributed.checkpoint.hf_storage import HuggingFaceStorageWriter

from ckptbench.workload.contract.checkpoint.sizes import format_bytes
from ckptbench.workload.storage.file.paths import local_path
from ckptbench.workload.storage.torch_seam import use_filesystem

FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(OSError):
    """A write found no room; ``strerror`` says what the checkpoint needs and what was free."""

    def __str__(self) -> str:
        name = errno.errorcode.get(self.errno or 0, str(self.errno))
        return f"{name}: {self.strerror} ({self.filename})"


class _KeepingFileIO(io.FileIO):
    """A file that remembers the first error of its writes, which its callers may swallow."""

    failure: OSError | None = None

    def write(self, b: Any) -> int:
        try:
            return super().write(b)
        except OSError as exc:
            if self.failure is None:
                self.failure = exc
            raise


class ReportingFileSystem(FileSystem):
    """DCP's local file system; a failed write is raised as the ``OSError`` behind it.

    ``rank_bytes`` and ``total_bytes`` are what this rank and the whole checkpoint write, named
    when the disk is full."""

    def __init__(self, rank_bytes: int, total_bytes: int) -> None:
        super().__init__()
        self.rank_bytes = rank_bytes
        self.total_bytes = total_bytes

    @contextmanager
    def create_stream(
        self, path: str | os.PathLike[str], mode: str
    ) -> Generator[io.IOBase, None, None]:
        if not any(c in mode for c in "wax+"):
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        raw = _KeepingFileIO(os.fspath(path), mode)
        stream = io.BufferedWriter(raw)
        try:
            with stream:
                yield cast(io.IOBase, stream)
        except DiskFull:
            raise
        except BaseException as exc:
            failure = raw.failure or (exc if isinstance(exc, OSError) else None)
            if failure is None or failure.errno is None:
                raise
            raise self.named(failure, Path(path)) from exc

    def named(self, failure: OSError, path: Path) -> OSError:
        """``failure`` with ``path`` as its file name; for a full disk, with the bytes."""
        code = failure.errno or 0
        if code not in FULL:
            return type(failure)(code, failure.strerror or os.strerror(code), str(path))
        try:
            stat = os.statvfs(path.parent)
            free = f"{format_bytes(stat.f_bavail * stat.f_frsize)} free there"
        except OSError:
            free = "free space unknown"
        text = (
            f"{os.strerror(code)}: the checkpoint needs {format_bytes(self.total_bytes)} "
            f"({self.total_bytes} bytes), {format_bytes(self.rank_bytes)} "
            f"({self.rank_bytes} bytes) from this rank; {free}"
        )
        return DiskFull(code, text, str(path))


def writer(
    checkpoint_id: str,
    rank_bytes: int,
    total_bytes: int,
    safetensors: bool = False,
    **options: Any,
) -> FileSystemWriter:
    """DCP's ``FileSystemWriter`` on ``checkpoint_id`` (a path or file:// URL), writing through
    :class:`ReportingFileSystem`; with ``safetensors``, DCP's ``HuggingFaceStorageWriter`` as a
    distributed save does it (each rank its file under ``sharded/``, then the coordinator's
    ``finish`` consolidates them into one file beside it). ``options`` go to the writer."""
    path = str(local_path(checkpoint_id))
    out: FileSystemWriter
    if safetensors:
        out = HuggingFaceStorageWriter(
            path, save_distributed=True, enable_consolidation=True, **options
        )
        # The writer moved its own path under sharded/; keep that, through our file system.
        path = str(out.path)
    else:
        out = FileSystemWriter(path, **options)
    fs = ReportingFileSystem(rank_bytes, total_bytes)
    use_filesystem(out, fs, path)
    return out
