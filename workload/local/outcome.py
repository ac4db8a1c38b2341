"""How local ranks ended and what they reported: what :mod:`.runner` hands back, for either kind
of rank (a checkpoint rank's result or a data rank's)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar


class Ranked(Protocol):
    """What the runner needs of a rank's config: the checkpoint rank's and the data rank's."""

    @property
    def rank_count(self) -> int: ...
    @property
    def progress_timeout_seconds(self) -> float: ...
    def to_env(self) -> dict[str, str]: ...


class Reported(Protocol):
    @property
    def rank(self) -> int: ...


R = TypeVar("R", bound=Reported)


@dataclass(frozen=True)
class RankExit:
    rank: int
    pid: int
    returncode: int
    stopped_by_runner: bool
    peak_rss_bytes: int | None

    def describe(self) -> str:
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"killed by {name}"
        return f"exit code {self.returncode}"


@dataclass
class RanksOutcome(Generic[R]):
    """How the ranks ended and what they reported (a checkpoint rank's :class:`RankResult`, or
    a data rank's result)."""

    results: list[R]
    exits: list[RankExit]
    unreadable: dict[int, str] = field(default_factory=dict)
    first_failure: int | None = None
    timed_out: bool = False
    stalled: int | None = None  # a rank that made no progress for progress_timeout
    progress_timeout: float = 0.0
    interrupted: bool = False
    timeout_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def all_exited_zero(self) -> bool:
        return all(e.returncode == 0 for e in self.exits)

    def missing_why(self) -> dict[str, str]:
        """For each rank with no result: why (its exit, and what made the runner stop it)."""
        reported = {r.rank for r in self.results}
        why: dict[str, str] = {}
        for e in self.exits:
            if e.rank in reported:
                continue
            parts = [e.describe()]
            if e.rank == self.stalled:
                parts.append(self._stall_text())
            elif e.stopped_by_runner:
                parts.append(self._stop_reason())
            if e.rank in self.unreadable:
                parts.append(self.unreadable[e.rank])
            why[str(e.rank)] = "; ".join(parts)
        return why

    def _stop_reason(self) -> str:
        if self.interrupted:
            return "stopped by the runner on interrupt"
        if self.timed_out:
            return f"stopped by the runner after the {self.timeout_seconds:g} s timeout"
        if self.stalled is not None:
            return f"stopped by the runner after rank {self.stalled} made no progress"
        if self.first_failure is not None:
            return f"stopped by the runner after rank {self.first_failure} failed"
        return "stopped by the runner"

    def _stall_text(self) -> str:
        return (
            f"stopped by the runner: no heartbeat and no I/O for {self.progress_timeout:g} s "
            "(--progress-timeout)"
        )

    def peak_rss_bytes(self) -> list[int | None]:
        return [e.peak_rss_bytes for e in sorted(self.exits, key=lambda e: e.rank)]
