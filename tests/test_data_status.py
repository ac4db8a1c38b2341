"""A DataLoadingBenchmark's status from its JobSet and its pods' termination messages: the phase
and why, the figures as the workload's summarize computes them, conditions that keep their times,
and the failed rank named."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ckptbench.operator.data import status as data_status
from ckptbench.operator.data.status_schema import DataLoadingStatus, status_schema
from ckptbench.operator.spec.status_schema import status_body
from ckptbench.operator.status.pods import COMPLETION_INDEX, RESTART_ATTEMPT
from ckptbench.workload.contract.data import figures, waits
from ckptbench.workload.contract.data.results import DataRankResult

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=3)
WORLD = 4


@dataclass(frozen=True)
class Spec:
    world_size: int = WORLD
    resolved_au_floor: float | None = 0.9
    queue_name: str | None = None
    max_restarts: int = 0


def jobset(suspend: bool = False, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "bench", "namespace": "ns"},
        "spec": {"suspend": suspend},
        "status": {"conditions": conditions or []},
    }


def result(rank: int, **kw: Any) -> DataRankResult:
    base: dict[str, Any] = {
        "rank": rank, "host": f"node-{rank}", "accelerators": 2, "samples": 400,
        "bytes": 400_000 + rank, "batches": 40, "verified_bytes": 400_000 + rank,
        "compute_seconds": 1.8, "loop_seconds": 2.0, "au": [0.95, 0.91 + rank / 100],
        "first_batch_seconds": 0.1 + rank / 10, "epoch_seconds": [1.0 + rank, 1.2, 1.1],
        "epoch_samples": [134, 133, 133], "wait_histogram": waits.histogram([0.01 * rank] * 5),
    }  # fmt: skip
    return DataRankResult(**{**base, **kw})


def pod(
    rank: int,
    phase: str = "Succeeded",
    message: str | None = None,
    exit_code: int | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if phase in ("Succeeded", "Failed"):
        terminated: dict[str, Any] = {
            "exitCode": exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1),
            "reason": reason or ("Completed" if phase == "Succeeded" else "Error"),
            "finishedAt": f"2025-03-01T11:5{rank % 10}:00Z",
        }
        if message is not None:
            terminated["message"] = message
        state["terminated"] = terminated
    elif phase == "Running":
        state["running"] = {"startedAt": "2025-03-01T11:40:00Z"}
    return {
        "metadata": {
            "name": f"bench-rank-0-{rank}-x",
            "labels": {RESTART_ATTEMPT: "0"},
            "annotations": {COMPLETION_INDEX: str(rank)},
        },
        "status": {
            "phase": phase,
            "startTime": f"2025-03-01T11:4{rank % 10}:00Z",
            "containerStatuses": [{"name": "worker", "state": state}],
        },
    }


def done(rank: int, **kw: Any) -> dict[str, Any]:
    return pod(rank, "Succeeded", result(rank, **kw).to_message())


def failed(rank: int, error: str, reason: str = "Error") -> dict[str, Any]:
    message = DataRankResult(rank=rank, host=f"node-{rank}", error=error).to_message()
    return pod(rank, "Failed", message, exit_code=1, reason=reason)


def compute(*args: Any, **kw: Any) -> dict[str, Any]:
    return status_body(data_status.compute_status(*args, **kw))


ALL_DONE = [done(r) for r in range(WORLD)]
COMPLETED = [{"type": "Completed", "status": "True"}]


@pytest.mark.parametrize(
    ("name", "the_spec", "the_jobset", "pods", "phase", "reason", "in_message"),
    [
        ("no-jobset", Spec(), None, [], "Pending", "JobSetNotCreated", "not been created"),
        ("no-pods", Spec(), jobset(), [], "Pending", "PodsPending", "waiting"),
        ("queued", Spec(queue_name="q"), jobset(True), [], "Queued", "WaitingForAdmission", "q"),
        ("running", Spec(), jobset(), [pod(0, "Running")], "Running", "RanksRunning", "0/4"),
        ("all", Spec(), jobset(), ALL_DONE, "Succeeded", "AllRanksSucceeded", "4/4"),
        (
            "completed-missing",
            Spec(),
            jobset(conditions=COMPLETED),
            ALL_DONE[:3],
            "Failed",
            "ResultsMissing",
            "1 of 4 ranks left no readable result (ranks 3)",
        ),
        (
            "rank-failed",
            Spec(),
            jobset(),
            [*ALL_DONE[:2], failed(2, "OSError: no such bucket")],
            "Failed",
            "PodFailed",
            "rank 2 pod bench-rank-0-2-x failed with exit code 1: OSError: no such bucket",
        ),
        (
            "rank-failed-restarts-left",
            Spec(max_restarts=2),
            jobset(),
            [*ALL_DONE[:2], failed(2, "OSError: no such bucket")],
            "Running",
            "RanksRunning",
            "3/4",
        ),
        (
            "out-of-memory",
            Spec(),
            jobset(),
            [failed(1, "MemoryRefused: plan 9 GiB over 4 GiB", reason="Error")],
            "Failed",
            "OutOfMemory",
            "rank 1 pod",
        ),
        (
            "jobset-failed",
            Spec(max_restarts=1),
            jobset(conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimit"}]),
            [],
            "Failed",
            "JobSetFailed",
            "BackoffLimit",
        ),
    ],
)
def test_phase_and_reason(
    name: str,
    the_spec: Spec,
    the_jobset: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    phase: str,
    reason: str,
    in_message: str,
) -> None:
    status = compute(the_spec, the_jobset, pods, None, NOW)
    assert (status["phase"], status["reason"]) == (phase, reason)
    assert in_message in status["message"]
    assert ("failureReason" in status) == (phase == "Failed")
    types = {c["type"]: c["status"] for c in status["conditions"]}
    assert types["Complete"] == ("True" if phase == "Succeeded" else "False")
    assert types["Failed"] == ("True" if phase == "Failed" else "False")


def test_a_foreign_jobset_is_reported_not_adopted() -> None:
    status = compute(Spec(), None, [], None, NOW, foreign_jobset="JobSet bench is someone's")
    assert (status["phase"], status["reason"]) == ("Pending", "ForeignJobSet")
    created = next(c for c in status["conditions"] if c["type"] == "JobSetCreated")
    assert (created["status"], created["reason"]) == ("False", "ForeignJobSet")


def test_a_rank_that_reports_an_error_fails_the_run_by_name_once_all_reported() -> None:
    message = DataRankResult(rank=3, host="node-3", error="ValueError: bad parquet").to_message()
    pods = [*ALL_DONE[:3], pod(3, "Succeeded", message)]
    status = compute(Spec(), jobset(), pods, None, NOW)
    assert (status["phase"], status["reason"]) == ("Failed", "RankError")
    assert status["message"] == "rank 3 reported: ValueError: bad parquet"
    assert status["rankErrorCount"] == 1
    assert status["rankErrors"] == [
        {"rank": 3, "host": "node-3", "pod": "bench-rank-0-3-x", "error": "ValueError: bad parquet"}
    ]


# Each status field and the summary's figure it must carry, as summarize computed it.
FIGURES = [
    ("accelerators", "accelerators"),
    ("samples", "samples"),
    ("bytes", "bytes"),
    ("samplesPerSecond", "samples_per_second"),
    ("samplesPerSecondInterval", "samples_per_second_interval"),
    ("bytesPerSecond", "bytes_per_second"),
    ("bytesPerSecondInterval", "bytes_per_second_interval"),
    ("acceleratorUtilization", "accelerator_utilization"),
    ("acceleratorUtilizationInterval", "accelerator_utilization_interval"),
    ("acceleratorUtilizationMin", "accelerator_utilization_min"),
    ("auFloor", "au_floor"),
    ("auPassed", "au_passed"),
    ("firstBatchSeconds", "first_batch_seconds"),
    ("waits.p50Seconds", "batch_wait_p50_seconds"),
    ("waits.p90Seconds", "batch_wait_p90_seconds"),
    ("waits.p99Seconds", "batch_wait_p99_seconds"),
    ("epochs.seconds", "epoch_seconds"),
    ("verified", "verified"),
]


def _at(status: dict[str, Any], path: str) -> Any:
    value: Any = status
    for key in path.split("."):
        value = value[key]
    return value


@pytest.mark.parametrize(("field", "figure"), FIGURES)
def test_each_figure_is_summarize_s_own(field: str, figure: str) -> None:
    results = [result(r) for r in range(WORLD)]
    summary = figures.summarize(results, WORLD, 0.9)
    expected = getattr(summary, figure)
    assert expected is not None and expected != [], f"{figure}: the fixture must give one"
    got = _at(compute(Spec(), jobset(), ALL_DONE, None, NOW), field)
    if hasattr(expected, "model_dump"):
        expected = expected.model_dump(exclude_none=True)
    assert got == expected


def test_the_other_figures_of_a_succeeded_run() -> None:
    status = compute(Spec(), jobset(), ALL_DONE, None, NOW, generation=3, spec_hash="abc")
    results = [result(r) for r in range(WORLD)]
    summary = figures.summarize(results, WORLD, 0.9)
    assert (status["ranksReported"], status["ranksExpected"], status["ranksSummary"]) == (
        4,
        4,
        "4/4",
    )
    assert status["epochs"]["count"] == 3
    # Rank 3's own epochs are the longest (4.0 + 1.2 + 1.1 s).
    assert (status["slowestRank"], status["slowestRankPod"]) == (3, "bench-rank-0-3-x")
    assert status["sustainedAccelerators"] == summary.accelerators == 8
    assert status["throughput"].endswith("/s")
    assert (status["observedGeneration"], status["specHash"]) == (3, "abc")
    assert status["startTime"] == "2025-03-01T11:40:00Z"
    assert status["completionTime"] == "2025-03-01T11:53:00Z"
    assert "missingRanks" not in status and "rankErrors" not in status


@pytest.mark.parametrize(
    ("au", "floor", "passed", "sustained"),
    [
        ([0.95, 0.95], 0.9, True, 8),
        ([0.9, 0.9], 0.9, True, 8),  # at the floor is kept
        ([0.85, 0.85], 0.9, False, None),
        ([0.95, 0.95], None, None, None),  # no floor: no verdict
    ],
)
def test_the_au_floor_verdict(
    au: list[float], floor: float | None, passed: bool | None, sustained: int | None
) -> None:
    pods = [done(r, au=au) for r in range(WORLD)]
    status = compute(Spec(resolved_au_floor=floor), jobset(), pods, None, NOW)
    assert status.get("auPassed") == passed
    assert status.get("sustainedAccelerators") == sustained
    assert status.get("auFloor") == floor


@pytest.mark.parametrize("reported", [0, 1, 3, 4])
def test_ranks_reported_and_the_missing_named(reported: int) -> None:
    status = compute(Spec(), jobset(), ALL_DONE[:reported], None, NOW)
    assert status["ranksReported"] == reported
    assert status["ranksSummary"] == f"{reported}/{WORLD}"
    missing = list(range(reported, WORLD))
    assert status.get("missingRanks") == (missing or None)
    assert status.get("missingRankCount") == (len(missing) or None)


def test_unreadable_results_are_reported_not_raised() -> None:
    beyond = DataRankResult(rank=WORLD, epoch_seconds=[1.0]).to_message()
    pods = [pod(0, "Succeeded", "not json"), pod(1, "Succeeded", beyond)]
    pods[1]["metadata"]["annotations"] = {}  # no index: only its own word names its rank
    status = compute(Spec(), jobset(), pods, None, NOW)
    problems = [u["problem"] for u in status["unreadableResults"]]
    assert problems[0].startswith("termination message is not a data-loading result")
    assert problems[1] == "reports rank 4, but the run has ranks 0 to 3"
    assert status["ranksReported"] == 0


def test_a_condition_keeps_its_time_until_its_status_changes() -> None:
    first = compute(Spec(), jobset(), [pod(0, "Running")], None, NOW)
    again = compute(Spec(), jobset(), [pod(0, "Running"), *ALL_DONE[1:2]], first, LATER)
    times = {c["type"]: c["lastTransitionTime"] for c in again["conditions"]}
    assert times["Complete"] == times["Admitted"] == "2025-03-01T12:00:00Z"
    done_now = compute(Spec(), jobset(), ALL_DONE, again, LATER)
    complete = next(c for c in done_now["conditions"] if c["type"] == "Complete")
    assert (complete["status"], complete["lastTransitionTime"]) == ("True", "2025-03-01T12:03:00Z")
    # Once ended, the completion time stays what it was.
    later = compute(Spec(), jobset(), ALL_DONE, done_now, LATER + timedelta(hours=1))
    assert later["completionTime"] == done_now["completionTime"]
    assert later == done_now


def test_a_spec_change_is_a_condition() -> None:
    status = compute(Spec(), jobset(), ALL_DONE, None, NOW, spec_change="spec fields changed")
    rejected = next(c for c in status["conditions"] if c["type"] == "SpecChangeRejected")
    assert (rejected["status"], rejected["message"]) == ("True", "spec fields changed")


def test_the_memo_changes_nothing() -> None:
    memo = data_status.DataMemo()
    with_memo = [compute(Spec(), jobset(), ALL_DONE, None, NOW, memo=memo) for _ in range(2)]
    assert with_memo[0] == with_memo[1] == compute(Spec(), jobset(), ALL_DONE, None, NOW)
    assert len(memo.messages) == WORLD


def test_an_invalid_spec_fails_with_no_jobset() -> None:
    status = status_body(
        data_status.invalid_spec_status("spec.worldSize: too small", None, NOW, generation=2)
    )
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec")
    assert status["observedGeneration"] == 2
    types = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert types == {"JobSetCreated": ("False", "InvalidSpec"), "Failed": ("True", "InvalidSpec")}


def test_the_crd_schema_describes_every_field_the_status_writes() -> None:
    schema = status_schema()
    assert schema["x-kubernetes-preserve-unknown-fields"] is True
    written = compute(Spec(), jobset(), [*ALL_DONE[:3], failed(3, "boom")], None, NOW)
    assert set(written) <= set(schema["properties"])
    fields = {DataLoadingStatus.model_fields[f].alias or f for f in DataLoadingStatus.model_fields}
    assert fields == set(schema["properties"])
    conditions = schema["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert all("description" in p for p in schema["properties"].values())


def test_every_status_column_of_kubectl_get_is_a_field_the_status_writes() -> None:
    from ckptbench.operator.data.crd import PRINTER_COLUMNS

    written = compute(Spec(), jobset(), ALL_DONE, None, NOW)
    paths = [c["jsonPath"] for c in PRINTER_COLUMNS if c["jsonPath"].startswith(".status.")]
    assert len(paths) >= 5
    for path in paths:
        assert path.removeprefix(".status.") in written, path
