"""Phases of a benchmark, its condition types, and the conditions derived from the phase."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from ckptbench.operator.spec import names
from ckptbench.operator.spec.status_schema import Condition
from ckptbench.operator.status import conditions as cond
from ckptbench.operator.status.pods import object_name

PENDING = "Pending"
QUEUED = "Queued"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
PHASES = (PENDING, QUEUED, RUNNING, SUCCEEDED, FAILED)
TERMINAL_PHASES = (SUCCEEDED, FAILED)

# Condition types, in the order they appear in status.
JOBSET_CREATED = names.JOBSET_CREATED
ADMITTED = "Admitted"
COMPLETE = "Complete"
FAILED_CONDITION = "Failed"
SPEC_CHANGE_REJECTED = "SpecChangeRejected"

# True while the operator's last reconcile of the benchmark failed (the API refused a call, ...).
RECONCILE_ERROR = "ReconcileError"

# Reason of a benchmark whose name is taken by a JobSet it does not own.
FOREIGN_JOBSET = "ForeignJobSet"


class Queued(Protocol):
    """What the conditions need of a benchmark's spec, whichever its kind."""

    @property
    def queue_name(self) -> str | None: ...


class RunSpec(Queued, Protocol):
    """What the status needs of the benchmark's spec (CheckpointBenchmarkSpec provides it)."""

    @property
    def world_size(self) -> int: ...
    @property
    def load_world_size(self) -> int | None: ...
    @property
    def rank_count(self) -> int: ...
    @property
    def total_bytes(self) -> int: ...
    @property
    def max_restarts(self) -> int: ...


def benchmark_conditions(
    spec: Queued,
    jobset: Mapping[str, Any] | None,
    phase: str,
    reason: str,
    message: str,
    suspended: bool,
    previous: Mapping[str, Any],
    now: datetime,
    generation: int | None,
    spec_change: str | None,
) -> list[Condition]:
    def make(type_: str, status: cond.ConditionStatus, why: str, text: str) -> Condition:
        return cond.make_condition(type_, status, why, text, now, generation)

    name = object_name(jobset) if jobset is not None else ""
    desired = [
        make(JOBSET_CREATED, "True", "JobSetCreated", f"JobSet {name} exists")
        if jobset is not None
        else make(JOBSET_CREATED, "False", reason, message)
        if reason == FOREIGN_JOBSET
        else make(JOBSET_CREATED, "False", "JobSetNotCreated", "the JobSet has not been created")
    ]
    if jobset is None:
        desired.append(make(ADMITTED, "Unknown", "JobSetNotCreated", "no JobSet yet"))
    elif suspended:
        desired.append(make(ADMITTED, "False", "WaitingForAdmission", message))
    else:
        via = (
            f"admitted by Kueue to LocalQueue {spec.queue_name}"
            if spec.queue_name
            else "not queued"
        )
        desired.append(make(ADMITTED, "True", "Admitted", f"the JobSet runs ({via})"))
    if phase == SUCCEEDED:
        desired.append(make(COMPLETE, "True", reason, message))
    else:
        desired.append(make(COMPLETE, "False", phase, f"the benchmark is {phase.lower()}"))
    if phase == FAILED:
        desired.append(make(FAILED_CONDITION, "True", reason, message))
    else:
        desired.append(make(FAILED_CONDITION, "False", "NotFailed", "no rank has failed"))
    had_rejection = cond.find_condition(previous.get("conditions") or (), SPEC_CHANGE_REJECTED)
    if spec_change is not None:
        desired.append(make(SPEC_CHANGE_REJECTED, "True", "SpecImmutable", spec_change))
    elif had_rejection is not None:
        desired.append(
            make(
                SPEC_CHANGE_REJECTED, "False", "SpecMatches", "the spec matches the running JobSet"
            )
        )
    if cond.find_condition(previous.get("conditions") or (), RECONCILE_ERROR) is not None:
        desired.append(make(RECONCILE_ERROR, "False", "Reconciled", "the last reconcile succeeded"))
    return cond.merge_conditions(previous.get("conditions"), desired)


def with_reconcile_error(
    conditions: Sequence[Mapping[str, Any]] | None,
    message: str,
    now: datetime,
    generation: int | None,
) -> list[Condition]:
    """``conditions`` (as read from the API) with ReconcileError set True: the status the failed
    reconcile could not compute stays as it was, and says why it may be stale."""
    error = cond.make_condition(
        RECONCILE_ERROR, "True", "ReconcileFailed", message, now, generation
    )
    kept = [
        Condition.model_validate(c) for c in conditions or [] if c.get("type") != RECONCILE_ERROR
    ]
    return cond.merge_conditions(conditions, [*kept, error])
