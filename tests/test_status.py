"""Status aggregation: phase, conditions, aggregates and failure reasons from JobSet and pods."""

from __future__ import annotations

import gc
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.status_schema import BenchmarkStatus, status_body
from ckptbench.operator.status import compute as st
from ckptbench.operator.status.aggregate import LISTED
from ckptbench.operator.status.phases import with_reconcile_error
from ckptbench.operator.status.pods import COMPLETION_INDEX, RESTART_ATTEMPT
from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from ckptbench.workload.contract.results.records import record_of

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=3)
LAYER, PADDING = 10, 8
TOTAL = sizes.total_bytes(LAYER, PADDING)


def spec(world_size: int = 4, **extra: Any) -> CheckpointBenchmarkSpec:
    padding = max(PADDING, world_size)
    return CheckpointBenchmarkSpec(
        world_size=world_size,
        layer_size=LAYER,
        padding_size=padding,
        checkpoint_path="gs://bucket/bench",
        **extra,
    )


def jobset(suspend: bool = False, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "bench", "namespace": "ns"},
        "spec": {"suspend": suspend},
        "status": {"conditions": conditions or []},
    }


def result(
    rank: int,
    save: float = 1.0,
    load: float = 0.5,
    error: str | None = None,
    verified: bool | None = True,
    shard: int = TOTAL // 4,
) -> RankResult:
    return RankResult(
        rank=rank,
        host=f"node-{rank}",
        bytes=shard,
        save=OpTiming.of([save, save * 1.5], [save * 0.9, save * 1.4]),
        load=OpTiming.of([load, load], [load * 0.8, load * 0.8]),
        verified=verified,
        error=error,
    )


def pod(
    rank: int,
    phase: str = "Succeeded",
    message: str | None = None,
    exit_code: int | None = None,
    reason: str | None = None,
    attempt: int = 0,
    waiting: str | None = None,
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
    elif waiting:
        state["waiting"] = {"reason": waiting, "message": "back-off pulling image"}
    return {
        "metadata": {
            "name": f"bench-rank-0-{rank}-x{attempt}",
            "labels": {RESTART_ATTEMPT: str(attempt), "ckptbench.dev/benchmark": "bench"},
            "annotations": {COMPLETION_INDEX: str(rank)},
        },
        "status": {
            "phase": phase,
            "startTime": f"2025-03-01T11:4{rank % 10}:00Z",
            "containerStatuses": [{"name": "worker", "state": state}],
        },
    }


def compute(*args: Any, **kw: Any) -> dict[str, Any]:
    """compute_status's model as the API gets it: the tests read the fields by their wire names."""
    return status_body(st.compute_status(*args, **kw))


def invalid(*args: Any, **kw: Any) -> dict[str, Any]:
    return status_body(st.invalid_spec_status(*args, **kw))


def shard_of(world_size: int, rank: int) -> int:
    """The bytes ``spec(world_size)`` gives ``rank``: what an honest rank reports."""
    return sizes.shard_bytes(rank, world_size, LAYER, max(PADDING, world_size))


def done(rank: int, **kw: Any) -> dict[str, Any]:
    return pod(rank, "Succeeded", result(rank, **kw).to_termination_message())


ALL_DONE = [done(r, save=1.0 + r) for r in range(4)]


@pytest.mark.parametrize(
    ("name", "the_spec", "the_jobset", "pods", "phase", "reason", "in_message"),
    [
        ("no-jobset", spec(), None, [], "Pending", "JobSetNotCreated", "not been created"),
        ("no-pods", spec(), jobset(), [], "Pending", "PodsPending", "waiting"),
        (
            "image-pull",
            spec(),
            jobset(),
            [pod(0, "Pending", waiting="ImagePullBackOff")],
            "Pending",
            "PodsPending",
            "ImagePullBackOff",
        ),
        (
            "kueue-suspended",
            spec(queue_name="lq"),
            jobset(suspend=True),
            [],
            "Queued",
            "WaitingForAdmission",
            "Kueue has not admitted it to LocalQueue lq",
        ),
        ("running", spec(), jobset(), [pod(0, "Running")], "Running", "RanksRunning", "1 rank"),
        (
            "partial-report",
            spec(),
            jobset(),
            [*ALL_DONE[:2], pod(2, "Running"), pod(3, "Running")],
            "Running",
            "RanksRunning",
            "2/4 ranks reported",
        ),
        ("all-succeeded", spec(), jobset(), ALL_DONE, "Succeeded", "AllRanksSucceeded", "4/4"),
        (
            "jobset-completed-missing-messages",
            spec(),
            jobset(conditions=[{"type": "Completed", "status": "True"}]),
            ALL_DONE[:3],
            "Failed",
            "ResultsMissing",
            "1 of 4 ranks left no readable result (ranks 3)",
        ),
        (
            "jobset-completed-no-result-readable",
            spec(),
            jobset(conditions=[{"type": "Completed", "status": "True"}]),
            [pod(r, "Succeeded", "not json") for r in range(4)],
            "Failed",
            "ResultsMissing",
            "4 of 4 ranks left no readable result (ranks 0, 1, 2, 3); 4 results were unreadable",
        ),
        (
            "rendezvous-timeout",
            spec(),
            jobset(),
            [
                *ALL_DONE[:2],
                pod(
                    2,
                    "Failed",
                    RankResult(
                        rank=2,
                        error="RendezvousTimeout: bench-rank-0-0.bench.ns.svc did not answer",
                    ).to_termination_message(),
                    exit_code=3,
                ),
            ],
            "Failed",
            "RendezvousTimeout",
            "rank 2 pod bench-rank-0-2-x0 failed with exit code 3: RendezvousTimeout",
        ),
        (
            "verification-failed",
            spec(),
            jobset(),
            [pod(1, "Failed", result(1, verified=False).to_termination_message(), exit_code=4)],
            "Failed",
            "VerificationFailed",
            "rank 1",
        ),
        (
            "oom-no-message",
            spec(),
            jobset(),
            [pod(0, "Failed", None, exit_code=137, reason="OOMKilled")],
            "Failed",
            "OutOfMemory",
            "resources.limits.memory",
        ),
        (
            "garbage-message",
            spec(),
            jobset(),
            [pod(3, "Failed", "panic: not json", exit_code=2)],
            "Failed",
            "PodFailed",
            "rank 3 pod bench-rank-0-3-x0 failed with exit code 2",
        ),
        (
            "failure-with-restarts-left",
            spec(max_restarts=2),
            jobset(),
            [pod(0, "Failed", None, exit_code=1), pod(1, "Running")],
            "Running",
            "RanksRunning",
            "1 rank",
        ),
        (
            "jobset-failed",
            spec(max_restarts=2),
            jobset(
                conditions=[
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "ReachedMaxRestarts",
                        "message": "jobset failed",
                    }
                ]
            ),
            [],
            "Failed",
            "JobSetFailed",
            "ReachedMaxRestarts",
        ),
        (
            "rank-error-all-reported",
            spec(),
            jobset(),
            [*ALL_DONE[:3], done(3, error="OSError: disk full")],
            "Failed",
            "RankError",
            "rank 3 reported: OSError: disk full",
        ),
        (
            "old-attempt-ignored",
            spec(),
            jobset(),
            [
                pod(0, "Failed", None, attempt=0),
                *(
                    pod(r, "Succeeded", result(r).to_termination_message(), attempt=1)
                    for r in range(4)
                ),
            ],
            "Succeeded",
            "AllRanksSucceeded",
            "4/4",
        ),
    ],
)
def test_phase_and_reason(
    name: str,
    the_spec: CheckpointBenchmarkSpec,
    the_jobset: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    phase: str,
    reason: str,
    in_message: str,
) -> None:
    status = compute(the_spec, the_jobset, pods, None, NOW)
    assert (status["phase"], status["reason"]) == (phase, reason), status["message"]
    assert in_message in status["message"]
    assert ("failureReason" in status) is (phase == "Failed")
    types = {c["type"]: c["status"] for c in status["conditions"]}
    assert types["Complete"] == ("True" if phase == "Succeeded" else "False")
    assert types["Failed"] == ("True" if phase == "Failed" else "False")
    assert types["JobSetCreated"] == ("False" if the_jobset is None else "True")
    assert (
        types["Admitted"]
        == {None: "Unknown", True: "False", False: "True"}[
            None if the_jobset is None else the_jobset["spec"]["suspend"]
        ]
    )
    json.dumps(status)  # it must be JSON as it is patched


def test_succeeded_aggregates_match_summarize() -> None:
    status = compute(spec(), jobset(), ALL_DONE, None, NOW, generation=3)
    assert status["ranksReported"] == status["ranksExpected"] == 4
    assert status["ranksSummary"] == "4/4"
    assert status["checkpointBytes"] == TOTAL
    assert status["checkpointSize"] == sizes.format_bytes(TOTAL)
    assert status["observedGeneration"] == 3
    assert status["verified"] is True
    save = status["save"]
    # Collective per-sample duration is the max over ranks: rank 3 saves in 4.0 and 6.0 s.
    assert save["meanSeconds"] == pytest.approx(5.0)
    assert save["maxSeconds"] == pytest.approx(6.0)
    assert save["p50Seconds"] == pytest.approx(5.0)
    assert save["throughputBytesPerSecond"] == pytest.approx(TOTAL / 5.0, rel=1e-6)
    # The string shown beside it reads the same figure, not the least per-rank throughput.
    assert save["throughput"] == sizes.format_bytes(save["throughputBytesPerSecond"]) + "/s"
    assert save["throughput"] != sizes.format_bytes(save["minRankThroughputBytesPerSecond"]) + "/s"
    assert save["slowestRank"] == 3
    assert save["slowestRankPod"] == "bench-rank-0-3-x0"
    assert status["load"]["meanSeconds"] == pytest.approx(0.5)
    assert status["slowestRank"] == 3
    assert status["startTime"] == "2025-03-01T11:40:00Z"
    assert status["completionTime"] == "2025-03-01T11:53:00Z"
    assert "missingRanks" not in status


def test_missing_ranks_are_named() -> None:
    status = compute(spec(), jobset(), [ALL_DONE[0], ALL_DONE[2]], None, NOW)
    assert status["missingRanks"] == [1, 3]
    assert status["missingRankCount"] == 2


def test_unparseable_message_is_reported_not_raised() -> None:
    pods = [*ALL_DONE[:3], pod(3, "Succeeded", '{"rank": "three"}')]
    status = compute(spec(), jobset(), pods, None, NOW)
    assert status["unreadableResultCount"] == 1
    (entry,) = status["unreadableResults"]
    assert entry["pod"] == "bench-rank-0-3-x0"
    assert entry["rank"] == 3
    assert "rank" in entry["problem"]
    assert status["missingRanks"] == [3]


def test_result_claiming_another_rank_is_unreadable() -> None:
    impostor = pod(1, "Succeeded", result(2).to_termination_message())
    status = compute(spec(), jobset(), [impostor], None, NOW)
    assert "reported rank 2 but runs as rank 1" in status["unreadableResults"][0]["problem"]
    assert status["ranksReported"] == 0


def test_a_failed_pods_long_error_is_cut_short() -> None:
    message = RankResult(rank=2, error="OSError: " + "x" * 900).to_termination_message()
    status = compute(spec(), jobset(), [pod(2, "Failed", message, 1)], None, NOW)
    (failed,) = status["failedPods"]
    assert failed["error"].startswith("OSError: x") and len(failed["error"]) == 200


def test_the_start_time_once_written_is_kept() -> None:
    earlier = {"startTime": "2025-03-01T11:00:00Z"}
    assert compute(spec(), jobset(), ALL_DONE, earlier, NOW)["startTime"] == earlier["startTime"]
    assert compute(spec(), jobset(), ALL_DONE, None, NOW)["startTime"] == "2025-03-01T11:40:00Z"


def test_failed_pod_details() -> None:
    message = RankResult(rank=2, error="RendezvousTimeout: no answer").to_termination_message()
    status = compute(spec(), jobset(), [pod(2, "Failed", message, 3)], None, NOW)
    assert status["failedPods"] == [
        {
            "pod": "bench-rank-0-2-x0",
            "rank": 2,
            "exitCode": 3,
            "reason": "Error",
            "error": "RendezvousTimeout: no answer",
        }
    ]
    assert "rendezvousTimeoutSeconds" in status["failureReason"]


def test_invalid_spec_status_names_the_field() -> None:
    status = invalid("spec.worldSize: must be >= 1", None, NOW, generation=2)
    assert status["phase"] == "Failed"
    assert status["failureReason"] == "spec.worldSize: must be >= 1"
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"], failed["observedGeneration"]) == (
        "True",
        "InvalidSpec",
        2,
    )


@pytest.mark.parametrize(
    ("ran", "current", "expected"),
    [
        ({"worldSize": 4}, {"worldSize": 4}, None),
        ({"worldSize": 4}, {"worldSize": 8}, "worldSize"),
        ({"a": 1, "b": 2}, {"b": 3, "c": 4}, "a, b, c"),
    ],
)
def test_describe_spec_change(
    ran: dict[str, Any], current: dict[str, Any], expected: str | None
) -> None:
    described = st.describe_spec_change(ran, current)
    if expected is None:
        assert described is None
    else:
        assert described is not None
        assert f"changed after the run started: {expected};" in described


def test_spec_change_condition_appears_and_clears() -> None:
    first = compute(spec(), jobset(), [], None, NOW, spec_change="worldSize changed")
    rejected = next(c for c in first["conditions"] if c["type"] == "SpecChangeRejected")
    assert (rejected["status"], rejected["reason"]) == ("True", "SpecImmutable")
    second = compute(spec(), jobset(), [], first, LATER)
    cleared = next(c for c in second["conditions"] if c["type"] == "SpecChangeRejected")
    assert cleared["status"] == "False"
    assert cleared["lastTransitionTime"] == "2025-03-01T12:03:00Z"
    third = compute(spec(), jobset(), [], None, LATER)
    assert all(c["type"] != "SpecChangeRejected" for c in third["conditions"])


def test_deterministic_and_transition_times_kept() -> None:
    pods = [ALL_DONE[0], pod(1, "Running")]
    first = compute(spec(), jobset(), pods, None, NOW)
    again = compute(spec(), jobset(), pods, first, LATER)
    assert again == first  # nothing changed: the handler skips the patch
    finished = compute(spec(), jobset(), ALL_DONE, first, LATER)
    times = {c["type"]: c["lastTransitionTime"] for c in finished["conditions"]}
    assert times["JobSetCreated"] == "2025-03-01T12:00:00Z"
    assert times["Complete"] == "2025-03-01T12:03:00Z"
    # A terminal status is stable: its completion time does not move on later reconciles.
    assert compute(spec(), jobset(), ALL_DONE, finished, LATER + timedelta(hours=1)) == finished


@pytest.mark.parametrize("world_size", [1, 4, 64, 1000])
def test_status_size_is_bounded(world_size: int) -> None:
    the_spec = spec(world_size)
    pods = [done(r, shard=shard_of(world_size, r)) for r in range(world_size // 2)]
    pods += [pod(r, "Failed", "not json", exit_code=1) for r in range(world_size // 2, world_size)]
    status = compute(the_spec, jobset(), pods, None, NOW)
    size = len(json.dumps(status))
    assert size < 16 * 1024, size  # far under 256 KiB: no per-rank lists
    assert len(status.get("missingRanks", [])) <= 20  # the summary lists the first 20
    assert len(status.get("failedPods", [])) <= LISTED
    assert len(status.get("unreadableResults", [])) <= LISTED


def test_status_stays_bounded_when_every_rank_reports_a_long_error() -> None:
    # 1000 ranks that each report a 1 KiB error: status must stay far below etcd's limit.
    the_spec = spec(1000)
    errors = [
        done(r, shard=shard_of(1000, r), error=f"rank {r}: " + "x" * 1024) for r in range(1000)
    ]
    status = compute(the_spec, jobset(), errors, None, NOW)
    assert status["rankErrorCount"] == 1000
    assert len(status["rankErrors"]) <= LISTED
    assert all(len(e["error"]) <= 200 for e in status["rankErrors"])
    assert len(json.dumps(status)) < 256 * 1024


def test_a_foreign_jobset_is_reported_not_adopted() -> None:
    why = "JobSet bench already exists and has no controller owner: it is not adopted."
    status = compute(spec(), None, [], None, NOW, foreign_jobset=why)
    assert (status["phase"], status["reason"], status["message"]) == (
        "Pending",
        "ForeignJobSet",
        why,
    )
    created = next(c for c in status["conditions"] if c["type"] == "JobSetCreated")
    assert (created["status"], created["reason"], created["message"]) == (
        "False",
        "ForeignJobSet",
        why,
    )
    assert "jobSetName" not in status


def test_the_slowest_rank_is_the_one_with_the_most_io_not_the_longest_collective() -> None:
    from ckptbench.operator.status.aggregate import slowest_rank

    # Barrier to barrier rank 0 saw longer collectives; rank 1 did more I/O of its own.
    fast = RankResult(rank=0, save=OpTiming.of([3.0, 3.0], [0.5, 0.5]))
    slow = RankResult(rank=1, save=OpTiming.of([2.9, 2.9], [2.5, 2.5]))
    assert slowest_rank([record_of(fast), record_of(slow)]) == 1


def test_status_carries_each_ranks_io_seconds_and_the_procedure() -> None:
    status = compute(spec(), jobset(), ALL_DONE, None, NOW)
    assert status["procedure"] == "ckptbench"
    save = status["save"]
    assert len(save["rankIoSeconds"]) == 4
    assert save["slowestRankSeconds"] == max(save["rankIoSeconds"])
    assert {"planningSeconds", "collectiveOverheadSeconds"} <= set(save)


def _statuses() -> dict[str, BenchmarkStatus]:
    """A status of every shape the operator writes."""
    failed = [pod(r, "Failed", "not json", exit_code=1) for r in range(2)]
    errors = [done(r, error="disk full") for r in range(4)]
    completed = jobset(conditions=[{"type": "Completed", "status": "True"}])
    out = {
        "succeeded": st.compute_status(spec(), jobset(), ALL_DONE, None, NOW, generation=2),
        "failed-pods": st.compute_status(spec(), jobset(), failed, None, NOW),
        "rank-errors": st.compute_status(spec(), jobset(), errors, None, NOW),
        "missing": st.compute_status(spec(), completed, ALL_DONE[:2], None, NOW),
        "queued": st.compute_status(spec(queue_name="q"), jobset(suspend=True), [], None, NOW),
        "foreign": st.compute_status(spec(), None, [], None, NOW, foreign_jobset="taken"),
        "invalid": st.invalid_spec_status("spec.worldSize: bad", None, NOW, generation=1),
        "spec-change": st.compute_status(spec(), jobset(), [], None, NOW, spec_change="edited"),
    }
    written = status_body(out["succeeded"])["conditions"]
    broken = with_reconcile_error(written, "RuntimeError: x", NOW, 2)
    out["reconcile-error"] = out["succeeded"].model_copy(update={"conditions": broken})
    return out


@pytest.mark.parametrize("shape", sorted(_statuses()))
def test_what_is_written_reads_back_as_the_same_status(shape: str) -> None:
    # The patch body is the model's wire form: read back (as the next reconcile's ``previous``
    # is), it is the same status, so every name written is one the schema declares.
    status = _statuses()[shape]
    body = status_body(status)
    assert BenchmarkStatus.model_validate(body) == status
    assert json.loads(json.dumps(body)) == body


@pytest.mark.parametrize(
    "body",
    [
        {"phase": "Running", "ranksExpectd": 4},
        {"save": {**status_body(_statuses()["succeeded"])["save"], "p999Seconds": 1.0}},
        {"conditions": [{**status_body(_statuses()["succeeded"])["conditions"][0], "x": 1}]},
        {"failedPods": [{"pod": "p", "reason": "Error", "signal": 9}]},
        {"rankErrors": [{"rank": 1, "pod": "p", "error": "e", "node": "n"}]},
        {"unreadableResults": [{"pod": "p", "problem": "bad", "why": "?"}]},
    ],
    ids=["top", "operation", "condition", "failed-pod", "rank-error", "unreadable"],
)
def test_an_undeclared_status_field_cannot_be_written(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        BenchmarkStatus.model_validate(body)


def test_a_computed_status_cannot_be_changed_after_the_fact() -> None:
    status = st.compute_status(spec(), jobset(), ALL_DONE, None, NOW)
    with pytest.raises(ValidationError, match="frozen"):
        status.phase = "Failed"


def test_equal_io_goes_to_the_lower_rank() -> None:
    from ckptbench.operator.status.aggregate import slowest_rank

    same = [RankResult(rank=r, save=OpTiming.of([1.0], [0.5])) for r in (3, 1, 2)]
    assert slowest_rank([record_of(r) for r in same]) == 1
    assert slowest_rank([record_of(RankResult(rank=0))]) is None


@pytest.mark.parametrize("enabled", [True, False])
def test_the_cyclic_collector_stays_out_of_the_aggregation(enabled: bool) -> None:
    # Its full passes rescanned every parsed result and pod again and again, freeing nothing:
    # the part of the cost that grew faster than the ranks. No collection runs inside; the
    # collector is left as it was found.
    world = 500
    the_spec, the_jobset = spec(world), jobset()
    pods = [done(r, shard=shard_of(world, r)) for r in range(world)]
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    gc.collect()  # counts start from nothing
    gc.callbacks.append(count)
    try:
        status = st.compute_status(the_spec, the_jobset, pods, None, NOW)
        assert gc.isenabled() is enabled
    finally:
        gc.callbacks.remove(count)
        (gc.enable if was else gc.disable)()
    assert status.ranks_reported == world
    # Allocations made while the collector is paused still count: the first one after it is
    # resumed may run one young-generation pass. The passes that rescan everything alive are the
    # older generations', and none may run.
    assert [g for g in collections if g > 0] == [] and len(collections) <= 1


def test_a_second_failed_reconcile_keeps_one_reconcile_error_and_its_time() -> None:
    written = status_body(st.compute_status(spec(), jobset(), [], None, NOW))["conditions"]
    first = status_body(BenchmarkStatus(conditions=with_reconcile_error(written, "A", NOW, 1)))
    again = with_reconcile_error(first["conditions"], "B", LATER, 1)
    errors = [c for c in again if c.type == "ReconcileError"]
    assert [(c.message, c.last_transition_time) for c in errors] == [("B", "2025-03-01T12:00:00Z")]
    assert [c.type for c in again][:-1] == [c["type"] for c in written]
