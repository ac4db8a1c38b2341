"""The real operator process against kmock, for a DataLoadingBenchmark: CR in, JobSet out, the
ranks' DataRankResults in, a typed status and the data series out; a failed rank named, a spec
edit refused, a same-named CheckpointBenchmark kept apart, deletion."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ckptbench.operator.data import names as data_names
from ckptbench.operator.data.status_schema import status_schema
from ckptbench.operator.render import jobset as rendering
from ckptbench.operator.render import labels as render_labels
from ckptbench.operator.spec import names as spec_names
from ckptbench.workload.contract.data import figures, waits
from ckptbench.workload.contract.data.results import DataRankResult
from harness.kmock_cluster import Client, EmulatorThread
from harness.operator_process import Operator, wait_for
from tests.test_operator_kmock import benchmark as checkpoint_benchmark
from tests.test_operator_kmock import rank_pod as checkpoint_pod

API = f"{spec_names.GROUP}/{spec_names.VERSION}"
PLURAL = data_names.PLURAL
JOBSET = render_labels.JOBSET_API_VERSION
NS = "default"
WORLD = 2


def data_benchmark(name: str, **spec_fields: Any) -> dict[str, Any]:
    spec = {"dataPath": "gs://bucket/data", "worldSize": WORLD, **spec_fields}
    return {
        "apiVersion": API,
        "kind": data_names.KIND,
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def result(rank: int, **kw: Any) -> DataRankResult:
    base: dict[str, Any] = {
        "rank": rank, "host": f"node-{rank}", "accelerators": 1, "samples": 300,
        "bytes": 300_000, "batches": 30, "verified_bytes": 300_000, "compute_seconds": 1.8,
        "loop_seconds": 2.0, "au": [0.9 + rank / 50], "first_batch_seconds": 0.25,
        "epoch_seconds": [1.0, 1.5 + rank, 1.25], "epoch_samples": [100, 100, 100],
        "wait_histogram": waits.histogram([0.01, 0.02, 0.03]),
    }  # fmt: skip
    return DataRankResult(**{**base, **kw})


def data_pod(
    bench: str, rank: int, phase: str, message: str | None, exit_code: int
) -> dict[str, Any]:
    terminated: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
    }
    if message is not None:
        terminated["message"] = message
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{bench}-rank-0-{rank}-dlbxy",
            "namespace": NS,
            "labels": {
                **render_labels.benchmark_labels(bench),
                render_labels.LABEL_KIND: data_names.KIND,
            },
            "annotations": {render_labels.COMPLETION_INDEX_ANNOTATION: str(rank)},
        },
        "spec": {"containers": [{"name": rendering.CONTAINER_NAME, "image": "img"}]},
        "status": {
            "phase": phase,
            "containerStatuses": [
                {"name": rendering.CONTAINER_NAME, "state": {"terminated": terminated}}
            ],
        },
    }


def status_of(client: Client, name: str) -> dict[str, Any]:
    found: dict[str, Any] = (client.get(API, PLURAL, NS, name) or {}).get("status") or {}
    return found


def phase_is(client: Client, name: str, phase: str) -> Callable[[], dict[str, Any] | None]:
    def probe() -> dict[str, Any] | None:
        status = status_of(client, name)
        return status if status.get("phase") == phase else None

    return probe


def test_a_data_benchmark_runs_to_succeeded_with_its_figures_and_series(
    client: Client, operator: Operator, emulator: EmulatorThread
) -> None:
    created = client.create(API, PLURAL, data_benchmark("reads"))
    jobset = wait_for("the JobSet", lambda: client.get(JOBSET, "jobsets", NS, "reads"))
    (owner,) = jobset["metadata"]["ownerReferences"]
    assert owner == render_labels.owner_reference(
        "reads", created["metadata"]["uid"], data_names.KIND
    )
    assert jobset["metadata"]["labels"][render_labels.LABEL_KIND] == data_names.KIND
    container = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["command"][:2] == list(data_names.WORKER_COMMAND)
    wait_for("status Pending", phase_is(client, "reads", "Pending"))

    results = [result(rank) for rank in range(WORLD)]
    for r in results:
        client.create("v1", "pods", data_pod("reads", r.rank, "Succeeded", r.to_message(), 0))
    status = wait_for("status Succeeded", phase_is(client, "reads", "Succeeded"))
    summary = figures.summarize(results, WORLD, 0.9)
    assert (status["ranksReported"], status["ranksExpected"]) == (WORLD, WORLD)
    assert status["samplesPerSecond"] == summary.samples_per_second
    assert status["bytesPerSecond"] == summary.bytes_per_second
    assert status["acceleratorUtilization"] == summary.accelerator_utilization
    assert (status["auFloor"], status["auPassed"]) == (0.9, True)
    assert status["firstBatchSeconds"] == 0.25
    assert status["epochs"]["count"] == 3
    assert (status["slowestRank"], status["slowestRankPod"]) == (1, "reads-rank-0-1-dlbxy")
    assert (
        status["specHash"] == jobset["metadata"]["annotations"][render_labels.SPEC_HASH_ANNOTATION]
    )
    assert set(status) <= set(status_schema()["properties"])  # what the CRD describes
    complete = next(c for c in status["conditions"] if c["type"] == "Complete")
    assert complete["status"] == "True"

    labels = f'backend="gcs",name="reads",namespace="{NS}"'

    def series_show_results() -> bool:
        text = operator.metrics()
        return (
            f'ckptbench_data_samples_per_second{{{labels},statistic="value"}} '
            f"{summary.samples_per_second}"
            in text
            and f'ckptbench_data_phase{{{labels},phase="Succeeded"}} 1.0' in text
            and f"ckptbench_data_au_passed{{{labels}}} 1.0" in text
        )

    wait_for("the data series", series_show_results)
    assert 'ckptbench_operator_reconciles_total{handler="data-create"}' in operator.metrics()
    # Its events are about the DataLoadingBenchmark, as `kubectl describe dlb` lists them.
    events = [
        e for e in client.list("v1", "events", NS) if e["involvedObject"].get("name") == "reads"
    ]
    assert [e["reason"] for e in events][:2] == ["JobSetCreated", "Admitted"]
    assert {e["involvedObject"]["kind"] for e in events} == {data_names.KIND}
    assert {e["involvedObject"]["uid"] for e in events} == {created["metadata"]["uid"]}
    # Kueue owns spec.suspend: the operator only ever created the JobSet.
    assert emulator.emulator is not None
    writes = {
        r.method
        for r in list(emulator.emulator._requests)
        if r.resource is not None and r.resource.plural == "jobsets" and r.method != "GET"
    }
    assert writes == {"POST"}


def test_a_failed_rank_fails_the_data_benchmark_by_name(client: Client, operator: Operator) -> None:
    client.create(API, PLURAL, data_benchmark("breaks"))
    wait_for("the JobSet", lambda: client.get(JOBSET, "jobsets", NS, "breaks"))
    error = "FileNotFoundError: gs://bucket/data/datasets/x/part-0.npz"
    message = DataRankResult(rank=1, host="node-1", error=error).to_message()
    client.create("v1", "pods", data_pod("breaks", 1, "Failed", message, 1))
    status = wait_for("status Failed", phase_is(client, "breaks", "Failed"))
    assert status["reason"] == "PodFailed"
    assert status["failureReason"].startswith(
        f"rank 1 pod breaks-rank-0-1-dlbxy failed with exit code 1: {error}"
    )
    assert status["failedPods"][0]["error"] == error
    assert status["rankErrors"][0]["rank"] == 1


def test_a_spec_edit_after_the_start_is_refused_and_reported(
    client: Client, operator: Operator
) -> None:
    client.create(API, PLURAL, data_benchmark("edited"))
    wait_for("the JobSet", lambda: client.get(JOBSET, "jobsets", NS, "edited"))
    client.patch(API, PLURAL, NS, "edited", {"spec": {"worldSize": 4}})

    def rejected() -> dict[str, Any] | None:
        for c in status_of(client, "edited").get("conditions", []):
            if c["type"] == "SpecChangeRejected" and c["status"] == "True":
                return dict(c)
        return None

    condition = wait_for("SpecChangeRejected", rejected)
    assert condition["reason"] == "SpecImmutable"
    assert "worldSize" in condition["message"]
    jobset = client.get(JOBSET, "jobsets", NS, "edited")
    assert jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == WORLD
    assert status_of(client, "edited")["ranksExpected"] == WORLD


def test_an_invalid_data_spec_fails_naming_the_field_and_makes_no_jobset(
    client: Client, operator: Operator
) -> None:
    client.create(API, PLURAL, data_benchmark("invalid", worldSize=0))
    status = wait_for("status Failed", phase_is(client, "invalid", "Failed"))
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert "spec.worldSize" in failed["message"]
    assert client.get(JOBSET, "jobsets", NS, "invalid") is None


def test_a_same_named_checkpoint_benchmark_s_ranks_are_not_read_as_data_ranks(
    client: Client, operator: Operator
) -> None:
    # The CheckpointBenchmark comes first and its JobSet takes the name: the data benchmark's is
    # a JobSet it does not own, so it waits, and reads none of the checkpoint's ranks.
    client.create(API, spec_names.PLURAL, checkpoint_benchmark("twin"))
    wait_for("the checkpoint's JobSet", lambda: client.get(JOBSET, "jobsets", NS, "twin"))
    client.create(API, PLURAL, data_benchmark("twin"))
    reason = wait_for("status ForeignJobSet", lambda: status_of(client, "twin").get("reason"))
    assert reason == "ForeignJobSet"
    assert "is controlled by CheckpointBenchmark twin" in status_of(client, "twin")["message"]
    # A data rank's pod under the same benchmark name (a stray of an earlier run): the
    # checkpoint benchmark must not take it as one of its own.
    stray = result(0).to_message()
    client.create("v1", "pods", data_pod("twin", 0, "Succeeded", stray, 0))
    client.create("v1", "pods", checkpoint_pod("twin", 1, "Running", None, 0))

    def checkpoint_status() -> dict[str, Any]:
        found = client.get(API, spec_names.PLURAL, NS, "twin") or {}
        return dict(found.get("status") or {})

    wait_for(
        "the checkpoint benchmark running", lambda: checkpoint_status().get("phase") == "Running"
    )
    assert checkpoint_status().get("unreadableResultCount") is None
    assert checkpoint_status()["ranksReported"] == 0
    assert "ranksReported" not in status_of(client, "twin") or (
        status_of(client, "twin")["ranksReported"] == 0
    )


def test_a_deleted_data_benchmark_loses_its_series(client: Client, operator: Operator) -> None:
    client.create(API, PLURAL, data_benchmark("gone"))
    wait_for(
        "its series", lambda: 'ckptbench_data_ranks{backend="gcs",name="gone"' in operator.metrics()
    )
    client.delete(API, PLURAL, NS, "gone")
    wait_for("its series to go", lambda: 'name="gone"' not in operator.metrics())
    assert client.get(API, PLURAL, NS, "gone") is None
