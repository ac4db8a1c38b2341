"""The steps both reconciles take: read an object unless it is gone, patch a status that changed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from ckptbench.operator.runtime.steps import patch_if_changed, read_live
from ckptbench.operator.spec.status_schema import BenchmarkStatus

NS, NAME = "team-a", "bench"


@pytest.mark.parametrize(
    ("stored", "alive"),
    [
        (None, False),
        ({"metadata": {"uid": "u1", "deletionTimestamp": "2025-03-01T12:00:00Z"}}, False),
        ({"metadata": {"uid": "u1"}, "status": {"phase": "Running"}}, True),
    ],
    ids=["gone", "being-deleted", "alive"],
)
def test_read_live_forgets_what_is_gone_or_being_deleted(
    stored: dict[str, Any] | None, alive: bool
) -> None:
    forgotten: list[tuple[str, str]] = []
    live = read_live(lambda ns, n: stored, lambda ns, n: forgotten.append((ns, n)), NS, NAME)
    assert (live is not None) is alive
    assert forgotten == ([] if alive else [(NS, NAME)])
    if live is not None:
        assert (live.uid, live.status) == ("u1", {"phase": "Running"})


def test_an_object_without_status_reads_as_an_empty_one() -> None:
    live = read_live(lambda ns, n: {"metadata": {}}, lambda ns, n: None, NS, NAME)
    assert live is not None and (live.uid, live.status) == ("", {})


@pytest.mark.parametrize(
    ("previous", "status", "sent"),
    [
        ({"phase": "Running"}, BenchmarkStatus(phase="Running"), None),
        ({}, BenchmarkStatus(phase="Pending"), {"phase": "Pending"}),
        (
            {"phase": "Failed", "reason": "X", "message": "m"},
            BenchmarkStatus(phase="Running"),
            {"phase": "Running", "reason": None, "message": None},
        ),
        (
            {"jobSetName": "old"},
            BenchmarkStatus(job_set_name="new", ranks_expected=2),
            {"jobSetName": "new", "ranksExpected": 2},
        ),
    ],
    ids=["unchanged", "new", "keys-removed", "by-wire-name"],
)
def test_patch_if_changed(
    previous: dict[str, Any], status: BenchmarkStatus, sent: dict[str, Any] | None
) -> None:
    patches: list[Mapping[str, Any]] = []

    def patch(namespace: str, name: str, body: Mapping[str, Any]) -> None:
        assert (namespace, name) == (NS, NAME)
        patches.append(body)

    body, patched = patch_if_changed(patch, NS, NAME, previous, status)
    assert patched is (sent is not None)
    assert patches == ([] if sent is None else [sent])
    assert body == {k: v for k, v in (sent or previous).items() if v is not None}
