"""Keep a rank's memory to one shard: big buffers go back to the OS when freed.

glibc raises its mmap threshold each time a large mmapped block is freed (up to 32 MiB), after
which tensors of that size come from the heap and stay resident when freed. A rank frees a whole
shard and allocates the next one every sample, so under the default it holds about two shards
(measured: peak RSS 2.7x the shard for 31 MiB tensors; 1.3x with a fixed threshold, and saves
faster too). Fixing the threshold turns the dynamic adjustment off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_M_MMAP_THRESHOLD = -3  # from <malloc.h>
MMAP_THRESHOLD_BYTES = 1 << 20


def return_big_buffers_to_the_os(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Serve allocations of ``threshold`` bytes or more with mmap; False where not glibc.

    A threshold already set through ``MALLOC_MMAP_THRESHOLD_`` is left as the user set it.
    """
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))


# -- the memory a rank may use --------------------------------------------------------------

_CGROUP_FILES = (
    "/sys/fs/cgroup/memory.max",  # cgroup v2
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",  # cgroup v1
)
# cgroup v1 reports "no limit" as a huge number (PAGE_COUNTER_MAX pages) rather than "max".
_V1_UNLIMITED = 1 << 60


def cgroup_limit_bytes(files: tuple[str, ...] = _CGROUP_FILES) -> int | None:
    """The container's memory limit, or None where there is none (or no cgroup to read)."""
    for name in files:
        try:
            with open(name) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return None if value >= _V1_UNLIMITED else value
    return None


def available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """The kernel's estimate of memory available to new work (``MemAvailable``)."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
