"""What this rank's process used while it benchmarked: CPU seconds, peak RSS, storage traffic.

CPU seconds (user and system, every thread of the process) and the bytes sent to and received
from storage (:mod:`ckptbench.workload.storage.traffic`) are counted from the start of the loop
to its end: the import of torch and the rendezvous before it are not the benchmark's. Peak RSS
is the process's high-water mark whenever it was reached, read once, here, from ``VmHWM``
(:func:`memory.peak_rss_bytes`; docs/measurement.md says why not ``ru_maxrss``).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

from ckptbench.workload.contract.results.rank import RankResources
from ckptbench.workload.rank.process import memory
from ckptbench.workload.storage.traffic import TRAFFIC


@dataclass(frozen=True)
class _Mark:
    user: float
    system: float
    sent: int
    received: int

    @classmethod
    def now(cls) -> _Mark:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return cls(usage.ru_utime, usage.ru_stime, TRAFFIC.sent, TRAFFIC.received)


class Meter:
    """Started when the loop starts; :meth:`read` gives what was used since."""

    def __init__(self) -> None:
        self._start = _Mark.now()

    def read(self) -> RankResources:
        end = _Mark.now()
        return RankResources(
            cpu_user_seconds=round(max(0.0, end.user - self._start.user), 6),
            cpu_system_seconds=round(max(0.0, end.system - self._start.system), 6),
            peak_rss_bytes=memory.peak_rss_bytes(),
            sent_bytes=end.sent - self._start.sent,
            received_bytes=end.received - self._start.received,
            node_memory_bytes=_node_memory(),
        )


def _node_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
