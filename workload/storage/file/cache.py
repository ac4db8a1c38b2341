"""Evicting a checkpoint's files from this node's page cache, so a load reads the disk.

Each rank reads back the file it has just written; left alone, the kernel serves that read from
memory and the load's throughput is memory speed. ``posix_fadvise(POSIX_FADV_DONTNEED)`` drops a
file's clean cached pages and needs no privilege. Pages still dirty are not dropped, so each file
is synced first (DCP's ``FileSystemWriter`` has usually synced it already, making this cheap).
A network file system may still cache on its server; that is outside this node's reach.
"""

from __future__ import annotations

import os
from pathlib import Path


def evict(folder: str | os.PathLike[str]) -> int:
    """Sync and evict every regular file directly in ``folder``; returns the bytes evicted."""
    evicted = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                evicted += evict_file(Path(entry.path))
    return evicted


def evict_file(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)
