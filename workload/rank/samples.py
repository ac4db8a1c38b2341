"""One rank's timed operations: each sample as measured, and the series reported."""

from __future__ import annotations

from dataclasses import dataclass, field

from ckptbench.workload.contract.results import OpTiming
from ckptbench.workload.storage import timing


@dataclass
class Op:
    """One timed operation on this rank."""

    seconds: float  # barrier to barrier: the collective as this rank saw it
    phases: timing.Phases  # planning, I/O and finish, timed inside the storage layer
    started_at: float  # wall clock (Unix seconds), for spans across ranks
    ended_at: float
    blocked_seconds: float | None = None
    gc_seconds: float = 0.0  # automatic garbage collections inside the operation


@dataclass
class Series:
    """One operation's timed samples on this rank."""

    ops: list[Op] = field(default_factory=list)

    def timing(self) -> OpTiming | None:
        if not self.ops:
            return None
        blocked = [op.blocked_seconds for op in self.ops if op.blocked_seconds is not None]
        return OpTiming.of(
            [op.seconds for op in self.ops],
            [op.phases.own_io or 0.0 for op in self.ops],
            [op.phases.planning or 0.0 for op in self.ops],
            finish_seconds=[op.phases.finish for op in self.ops],
            blocked_seconds=blocked or None,
            gc_seconds=[op.gc_seconds for op in self.ops],
            started_at=[op.started_at for op in self.ops],
            ended_at=[op.ended_at for op in self.ops],
        )
