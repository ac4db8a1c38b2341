"""The Kubernetes Events a reconcile emits: what changed between the previous status and the new.

Pure: the runtime posts what :func:`transitions` returns. An event is emitted once per change,
so a reconcile that finds nothing new emits nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ckptbench.operator.spec.status_schema import Condition
from ckptbench.operator.status.conditions import find_condition
from ckptbench.operator.status.phases import ADMITTED, FAILED, RUNNING, SUCCEEDED, TERMINAL_PHASES


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


class Lifecycle(Protocol):
    """What the events read of a status, whichever the kind of benchmark."""

    @property
    def phase(self) -> str | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def job_set_name(self) -> str | None: ...
    @property
    def conditions(self) -> Sequence[Condition] | None: ...


def transitions(
    previous: Mapping[str, Any], status: Lifecycle, *, created_jobset: bool
) -> list[Event]:
    """Events for what ``status`` says that ``previous`` (as read from the API) did not: the
    JobSet created, admitted, the ranks started, the benchmark succeeded or failed (with its
    machine reason)."""
    events: list[Event] = []
    if created_jobset:
        events.append(Event("Normal", "JobSetCreated", f"created JobSet {status.job_set_name}"))
    before = find_condition(previous.get("conditions") or (), ADMITTED) or {}
    admitted = next((c for c in status.conditions or () if c.type == ADMITTED), None)
    if admitted is not None and admitted.status == "True" and before.get("status") != "True":
        events.append(Event("Normal", "Admitted", admitted.message))
    was, phase = previous.get("phase"), status.phase
    if phase == was or was in TERMINAL_PHASES:
        return events
    message = status.message or ""
    if phase == RUNNING:
        events.append(Event("Normal", "Started", message))
    elif phase == SUCCEEDED:
        events.append(Event("Normal", "Succeeded", message))
    elif phase == FAILED:
        events.append(Event("Warning", status.reason or "Failed", message))
    return events
