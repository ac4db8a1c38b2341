"""metav1-style status conditions, merged the way Kubernetes controllers (JobSet's among them) do.

A condition's ``lastTransitionTime`` records when its ``status`` last changed, so it is kept while
the status stays the same even if the reason or message move on. Pure: no clock is read here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from ckptbench.operator.spec.status_schema import Condition

ConditionStatus = Literal["True", "False", "Unknown"]


def timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC with second precision, as the API server writes metav1.Time."""
    if moment.tzinfo is None:
        raise ValueError("timestamp: a timezone-aware datetime is required")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_condition(
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    observed_generation: int | None = None,
) -> Condition:
    if not reason or not reason[0].isalpha() or not reason.replace("_", "").isalnum():
        # metav1.Condition requires CamelCase reasons; a bad one would be rejected by the API.
        raise ValueError(f"condition reason: must be CamelCase letters and digits, got {reason!r}")
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=timestamp(now),
        observed_generation=observed_generation,
    )


def find_condition(conditions: Iterable[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    """A condition of a status as read from the API (which may hold ones this version does not
    write)."""
    for condition in conditions:
        if condition.get("type") == type_:
            return condition
    return None


def merge_conditions(
    previous: Sequence[Mapping[str, Any]] | None, desired: Sequence[Condition]
) -> list[Condition]:
    """The desired conditions, each keeping its previous ``lastTransitionTime`` when its status
    did not change. Conditions absent from ``desired`` are dropped; the order is ``desired``'s.

    ``previous`` is the status as read from the API: camelCase mappings."""
    merged: list[Condition] = []
    for condition in desired:
        before = find_condition(previous or (), condition.type)
        if (
            before is not None
            and before.get("status") == condition.status
            and isinstance(before.get("lastTransitionTime"), str)
        ):
            kept = before["lastTransitionTime"]
            condition = condition.model_copy(update={"last_transition_time": kept})
        merged.append(condition)
    return merged
