"""Raw sequential I/O of a checkpoint's bytes: the yardstick the ``file`` backend is judged by.

Both bench scripts that compare the ``file`` backend with raw I/O write and read the same way, so
that their yardsticks agree: one file written with unbuffered writes of one tensor's bytes and
fsynced (DCP's FileSystemWriter syncs its files too), and read back into fresh anonymous memory
per tensor, untouched until read into, as DCP's FileSystemReader has ``torch.load`` read each item
into a new buffer (before copying it into the template, whose pages the loop touched untimed):
both sides pay the same page faults.
"""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path


def pattern(tensor_bytes: int) -> memoryview:
    """One tensor's worth of bytes to write: not zeros, which a file system could elide."""
    return memoryview(bytes(range(256)) * (tensor_bytes // 256) + bytes(tensor_bytes % 256))


def write(path: Path, chunk: memoryview, chunks: int) -> float:
    """Write ``chunks`` times ``chunk`` and fsync; returns the seconds the fsync took."""
    with path.open("wb", buffering=0) as f:
        for _ in range(chunks):
            f.write(chunk)
        t0 = time.perf_counter()
        os.fsync(f.fileno())
        return time.perf_counter() - t0


def read(path: Path, tensor_bytes: int, chunks: int) -> None:
    with path.open("rb", buffering=0) as f:
        for _ in range(chunks):
            with mmap.mmap(-1, tensor_bytes) as dest:
                view = memoryview(dest)
                n = 0
                while n < tensor_bytes:
                    got = f.readinto(view[n:])
                    if not got:
                        raise EOFError(f"{path}: short read")
                    n += got
                view.release()
