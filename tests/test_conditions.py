"""metav1 condition helpers: transition times are kept while a condition's status holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from ckptbench.operator.spec.status_schema import Condition, status_body
from ckptbench.operator.status import conditions as cond

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def c(
    type_: str, status: str, reason: str = "Why", message: str = "", at: datetime = T0
) -> Condition:
    return cond.make_condition(type_, status, reason, message, at)  # type: ignore[arg-type]


def read(type_: str, status: str, reason: str = "Why", message: str = "") -> dict[str, Any]:
    """A condition of the previous status, as read from the API (stamped at T0)."""
    return status_body(c(type_, status, reason, message))


@pytest.mark.parametrize(
    ("previous", "desired", "expected_times"),
    [
        pytest.param(None, [c("A", "True", at=T1)], [T1], id="no-previous"),
        pytest.param([read("A", "True")], [c("A", "True", at=T1)], [T0], id="same-status-kept"),
        pytest.param(
            [read("A", "True", "Old", "old")],
            [c("A", "True", "New", "new", at=T1)],
            [T0],
            id="reason-change-keeps-time",
        ),
        pytest.param([read("A", "False")], [c("A", "True", at=T1)], [T1], id="status-flip-stamps"),
        pytest.param([read("A", "Unknown")], [c("A", "False", at=T1)], [T1], id="unknown-to-false"),
        pytest.param(
            [read("B", "True"), read("A", "True")],
            [c("A", "True", at=T1), c("C", "True", at=T1)],
            [T0, T1],
            id="per-type-and-dropped",
        ),
        pytest.param(
            [{"type": "A", "status": "True"}], [c("A", "True", at=T1)], [T1], id="no-old-time"
        ),
    ],
)
def test_merge_keeps_transition_time_while_status_holds(
    previous: list[dict[str, Any]] | None,
    desired: list[Condition],
    expected_times: list[datetime],
) -> None:
    merged = cond.merge_conditions(previous, desired)
    assert [m.type for m in merged] == [d.type for d in desired]
    assert [m.last_transition_time for m in merged] == [cond.timestamp(t) for t in expected_times]
    # Reason and message always follow the desired condition.
    assert [(m.reason, m.message) for m in merged] == [(d.reason, d.message) for d in desired]


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (T0, "2025-01-02T03:04:05Z"),
        (T0.replace(microsecond=999_999), "2025-01-02T03:04:05Z"),
        (
            datetime(2025, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2))),
            "2025-01-02T03:04:05Z",
        ),
    ],
)
def test_timestamp_is_utc_seconds(moment: datetime, text: str) -> None:
    assert cond.timestamp(moment) == text


def test_timestamp_rejects_naive_datetime() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        cond.timestamp(datetime(2025, 1, 1))


@pytest.mark.parametrize("reason", ["", "has space", "1Leading", "dash-ed"])
def test_make_condition_rejects_reasons_the_api_would(reason: str) -> None:
    with pytest.raises(ValueError, match="CamelCase"):
        cond.make_condition("A", "True", reason, "", T0)


@pytest.mark.parametrize(("generation", "has_key"), [(None, False), (0, True), (7, True)])
def test_observed_generation_only_when_given(generation: int | None, has_key: bool) -> None:
    made = status_body(cond.make_condition("A", "True", "Ok", "m", T0, generation))
    assert ("observedGeneration" in made) is has_key
    if has_key:
        assert made["observedGeneration"] == generation
