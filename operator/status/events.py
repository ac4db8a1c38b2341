"""The Kubernetes Events a reconcile emits: what changed between the previous status and the new.

Pure: the runtime posts what :func:`transitions` returns. An event is emitted once per change,
so a reconcile that finds nothing new emits nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ckptbench.operator.status.conditions import find_condition
from ckptbench.operator.status.phases import ADMITTED, FAILED, RUNNING, SUCCEEDED, TERMINAL_PHASES


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


def transitions(
    previous: Mapping[str, Any], status: Mapping[str, Any], *, created_jobset: bool
) -> list[Event]:
    """Events for what ``status`` says that ``previous`` did not: the JobSet created, admitted,
    the ranks started, the benchmark succeeded or failed (with its machine reason)."""
    events: list[Event] = []
    if created_jobset:
        events.append(
            Event("Normal", "JobSetCreated", f"created JobSet {status.get('jobSetName')}")
        )
    before = find_condition(previous.get("conditions") or (), ADMITTED) or {}
    now = find_condition(status.get("conditions") or (), ADMITTED) or {}
    if now.get("status") == "True" and before.get("status") != "True":
        events.append(Event("Normal", "Admitted", str(now.get("message", ""))))
    was, phase = previous.get("phase"), status.get("phase")
    if phase == was or was in TERMINAL_PHASES:
        return events
    message = str(status.get("message", ""))
    if phase == RUNNING:
        events.append(Event("Normal", "Started", message))
    elif phase == SUCCEEDED:
        events.append(Event("Normal", "Succeeded", message))
    elif phase == FAILED:
        events.append(Event("Warning", str(status.get("reason") or "Failed"), message))
    return events
