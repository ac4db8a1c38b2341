"""Where a benchmark's run is, whichever its kind: its phase, why, and when it ended.

Both kinds run as a JobSet of ranks that report through their termination messages; what differs
is how their results are summed and what makes a run fail, which the caller decides and hands in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ckptbench.operator.status import conditions as cond
from ckptbench.operator.status.failure import terminal_transition
from ckptbench.operator.status.phases import (
    FAILED,
    FOREIGN_JOBSET,
    PENDING,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    TERMINAL_PHASES,
)


@dataclass(frozen=True)
class Where:
    phase: str
    reason: str
    message: str
    suspended: bool  # the JobSet waits for Kueue's admission


def where(
    jobset: Mapping[str, Any] | None,
    foreign_jobset: str | None,
    failure: tuple[str, str] | None,
    succeeded: bool,
    reported: int,
    expected: int,
    running: int,
    pending_reason: str | None,
    queue_name: str | None,
) -> Where:
    """The phase of a run: its JobSet (None: not created; ``foreign_jobset`` says why when one of
    its name is someone else's), ``failure`` (reason, message) when it failed, whether every rank
    succeeded, ``reported`` of ``expected`` ranks' results read, ``running`` pods."""
    suspended = bool(jobset is not None and (jobset.get("spec") or {}).get("suspend"))
    if jobset is None and foreign_jobset is not None:
        return Where(PENDING, FOREIGN_JOBSET, foreign_jobset, suspended)
    if jobset is None:
        return Where(PENDING, "JobSetNotCreated", "the JobSet has not been created yet", suspended)
    if failure is not None:
        return Where(FAILED, failure[0], failure[1], suspended)
    if succeeded:
        message = f"{reported}/{expected} ranks reported success"
        return Where(SUCCEEDED, "AllRanksSucceeded", message, suspended)
    if suspended:
        queue = queue_name or "(none)"
        message = (
            f"the JobSet is suspended: Kueue has not admitted it to LocalQueue {queue} yet "
            "(check the queue's ClusterQueue quota and `kubectl get workloads`)"
        )
        return Where(QUEUED, "WaitingForAdmission", message, suspended)
    if running > 0 or reported > 0:
        message = f"{running} rank pods running, {reported}/{expected} ranks reported"
        return Where(RUNNING, "RanksRunning", message, suspended)
    return Where(
        PENDING, "PodsPending", pending_reason or "waiting for the rank pods to start", suspended
    )


def completion_time(
    phase: str,
    previous: Mapping[str, Any],
    finished: str | None,
    jobset: Mapping[str, Any] | None,
    now: datetime,
) -> str | None:
    """When a finished run ended: as first written (it never moves), else the last rank's end,
    else the JobSet's, else now; None while it runs."""
    if phase not in TERMINAL_PHASES:
        return None
    ended = previous.get("phase") in TERMINAL_PHASES
    return (
        (kept_time(previous, "completionTime") if ended else None)
        or finished
        or terminal_transition(jobset)
        or cond.timestamp(now)
    )


def kept_time(previous: Mapping[str, Any], key: str) -> str | None:
    """A timestamp the previous status holds, kept so that it does not move on later reconciles."""
    value = previous.get(key)
    return value if isinstance(value, str) and value else None
