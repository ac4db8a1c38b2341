"""The rank's allocator setting, chosen by procedure, and the memory a rank may use.

glibc's malloc serves blocks of ``M_MMAP_THRESHOLD`` bytes or more with a fresh ``mmap`` and
gives them back to the OS when freed. By default the threshold is dynamic: it starts at 128 KiB
and rises to the size of each larger mmapped block freed (up to 32 MiB), after which blocks of
that size come from the heap, are reused already faulted in, and stay resident when freed.

Fixing the threshold at 1 MiB (what every rank did before) returns freed shards to the OS, but
makes every transfer buffer a fresh, faulted mapping: the reference procedure on gcsfs loaded
1.39x slower with it than at the defaults (median of 6 interleaved rounds), as Google's script
does when given the same setting. So the ``reference`` procedure runs at glibc's defaults, as
that script does; ckptbench's own procedures run at the defaults too, and hand freed memory back
(``malloc_trim``) once a saved shard is dropped, outside any timed operation: the defaults alone
held a second shard at the peak. The figures: ``docs/measurement.md`` (the allocator),
``bench/bench_allocator.py``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ckptbench.workload.contract.choices import Procedure

_M_MMAP_THRESHOLD = -3  # from <malloc.h>
MMAP_THRESHOLD_BYTES = 1 << 20
ENV_THRESHOLD = "MALLOC_MMAP_THRESHOLD_"  # glibc's own variable, read when the process starts


@dataclass(frozen=True)
class AllocatorPolicy:
    """How a rank's malloc runs: a fixed mmap threshold (None: glibc's dynamic default), and
    whether freed memory is handed back (``malloc_trim``) once a saved shard is dropped, before
    the load template is allocated: untimed, between operations, never inside one."""

    mmap_threshold: int | None
    trim_after_drop: bool


DEFAULTS = AllocatorPolicy(None, trim_after_drop=False)
DEFAULTS_TRIMMED = AllocatorPolicy(None, trim_after_drop=True)
FIXED_1MIB = AllocatorPolicy(MMAP_THRESHOLD_BYTES, trim_after_drop=False)

POLICY_BY_PROCEDURE: dict[Procedure, AllocatorPolicy] = {
    Procedure.REFERENCE: DEFAULTS,  # as the reference script runs
    Procedure.CKPTBENCH: DEFAULTS_TRIMMED,
    Procedure.MLPERF: DEFAULTS_TRIMMED,
}


@dataclass(frozen=True)
class AllocatorSetting:
    """What the rank's malloc ran with, as each rank's result records it."""

    policy: AllocatorPolicy
    source: str  # "procedure" (our choice), "environment" (MALLOC_MMAP_THRESHOLD_), "unavailable"

    def record(self) -> dict[str, object]:
        threshold = self.policy.mmap_threshold
        text = (
            "glibc defaults (dynamic mmap threshold)"
            if threshold is None
            else f"fixed mmap threshold {threshold} B"
        )
        if self.policy.trim_after_drop:
            text += ", malloc_trim after each saved shard is dropped"
        return {
            "malloc": text,
            "mmap_threshold_bytes": threshold,
            "trim_after_drop": self.policy.trim_after_drop,
            "source": self.source,
        }


_applied: list[AllocatorPolicy] = []  # what configure_allocator applied in this process


def configure_allocator(
    procedure: Procedure, environ: Mapping[str, str] | None = None
) -> AllocatorSetting:
    """Apply ``procedure``'s allocator policy to this process and say what runs.

    A threshold set through ``MALLOC_MMAP_THRESHOLD_`` is the user's: glibc applied it at start,
    and it is left alone and recorded (with no trimming either). Where malloc is not glibc's
    (musl, macOS) nothing is tuned, and the record says so.
    """
    env = os.environ if environ is None else environ
    _applied.clear()
    if ENV_THRESHOLD in env:
        raw = env[ENV_THRESHOLD].strip()
        return AllocatorSetting(
            AllocatorPolicy(int(raw) if raw.isdigit() else None, False), "environment"
        )
    policy = POLICY_BY_PROCEDURE[procedure]
    libc = _glibc()
    if libc is None:
        return AllocatorSetting(DEFAULTS, "unavailable")
    if policy.mmap_threshold is not None:
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
        if not libc.mallopt(_M_MMAP_THRESHOLD, policy.mmap_threshold):
            return AllocatorSetting(DEFAULTS, "unavailable")
    _applied.append(policy)
    return AllocatorSetting(policy, "procedure")


def after_drop() -> bool:
    """A saved shard was just dropped: hand its freed pages back if the policy says so.

    Under glibc's dynamic threshold, tensors up to 32 MiB come from the heap, and a shard freed
    there stays resident while the next one is allocated beside it (measured: a second shard at
    the peak). ``malloc_trim(0)`` returns every free page of every arena. The next template's
    pages are then faulted in afresh, as under a fixed threshold: the reference layout's by its
    untimed NaN fill, a model's (marked once per block) partly during its load. True when memory
    was trimmed.
    """
    if not (_applied and _applied[-1].trim_after_drop):
        return False
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
    libc.malloc_trim(0)
    return True


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt  # noqa: B018 - glibc's; musl and macOS have no mallopt/malloc_trim
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def return_big_buffers_to_the_os(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Serve allocations of ``threshold`` bytes or more with mmap; False where not glibc.

    A threshold already set through ``MALLOC_MMAP_THRESHOLD_`` is left as the user set it.
    """
    if ENV_THRESHOLD in os.environ:
        return False
    libc = _glibc()
    if libc is None:
        return False
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))


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


def resident_bytes(statm: str = "/proc/self/statm") -> int:
    """What this process holds in memory now (its resident set), 0 where it cannot be read."""
    try:
        with open(statm) as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def peak_rss_bytes(pid: int | str = "self") -> int | None:
    """A process's peak resident memory (``VmHWM``), or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None
