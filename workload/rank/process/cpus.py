"""Size torch's intra-op thread pool from the container's CPU quota.

torch (and OpenMP) size their pools from the cores they see, not from the container's CPU limit:
a rank limited to 2 CPUs on a 64-core node would run 64 threads contending for 2 CPUs. In a pod
the operator sets ``OMP_NUM_THREADS`` from the spec's limit; a rank started any other way (by hand,
by another launcher) reads the cgroup's quota itself, so both run with the same number of threads.
A value the user set in ``OMP_NUM_THREADS`` always wins.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Where cgroup v1 mounts the cpu controller (alone or joined with cpuacct).
_V1_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """The CPUs the container's quota allows (quota / period), or None when there is no quota
    (or no cgroup file to read). cgroup v2 ``cpu.max`` (``max 100000`` or ``200000 100000``),
    else v1 ``cpu.cfs_quota_us`` (-1 for none) and ``cpu.cfs_period_us``."""
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        fields = v2.split()
        if not fields or fields[0] == "max":
            return None
        period = fields[1] if len(fields) > 1 else "100000"
        return _ratio(fields[0], period)
    for name in _V1_DIRS:
        quota_us = _read(root / name / "cpu.cfs_quota_us")
        period_us = _read(root / name / "cpu.cfs_period_us")
        if quota_us is not None and period_us is not None:
            return _ratio(quota_us, period_us)
    return None


def threads_for(limit: float | None, cpus: int) -> int | None:
    """The quota rounded up to whole CPUs, at least 1 and no more than the ``cpus`` this process
    may run on; None without a quota."""
    if limit is None:
        return None
    return max(1, min(cpus, math.ceil(limit)))


def limit_torch_threads(
    environ: Mapping[str, str] | None = None, root: Path | None = None, cpus: int | None = None
) -> int:
    """Set torch's intra-op threads from the CPU quota unless ``OMP_NUM_THREADS`` is set, and
    return the number of threads torch will use. Defaults: this process's environment, the
    cgroup at :data:`CGROUP_ROOT`, the CPUs this process may run on."""
    import torch

    environ = os.environ if environ is None else environ
    if not environ.get("OMP_NUM_THREADS"):
        available = cpus if cpus is not None else len(os.sched_getaffinity(0))
        threads = threads_for(cgroup_cpu_limit(root or CGROUP_ROOT), available)
        if threads is not None:
            torch.set_num_threads(threads)
    return int(torch.get_num_threads())


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    if q <= 0 or p <= 0:  # v1 says -1 for "no quota"
        return None
    return q / p
