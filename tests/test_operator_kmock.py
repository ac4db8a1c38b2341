"""The real operator process against kmock: CR in, JobSet out, pods' results in, status and
metrics out; failures, invalid specs, spec edits, restarts and deletion."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ckptbench.operator.render import jobset as rendering
from ckptbench.operator.render import labels as render_labels
from ckptbench.operator.spec import names as spec_names
from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from harness.kmock_cluster import Client, EmulatorThread
from harness.operator_process import DEFAULT_IMAGE, Operator, running_operator, wait_for

CKB = f"{spec_names.GROUP}/{spec_names.VERSION}"
JOBSET = render_labels.JOBSET_API_VERSION
NS = "default"
IMAGE = DEFAULT_IMAGE  # what the operator fixture passes as --default-image
LAYER, PADDING, WORLD = 10, 8, 4


RESYNC_SECONDS = 2


def ckptbench_object(
    kind: str, name: str, spec: dict[str, Any], namespace: str = NS
) -> dict[str, Any]:
    return {
        "apiVersion": CKB,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def reference_spec(world: int, layer: int, padding: int, path: str, **more: Any) -> dict[str, Any]:
    """A spec of the reference layout, small enough for the emulator; ``more`` overrides."""
    return {
        "worldSize": world,
        "layerSize": layer,
        "paddingSize": padding,
        "checkpointPath": path,
        **more,
    }


def benchmark(name: str, **spec_fields: Any) -> dict[str, Any]:
    spec = reference_spec(WORLD, LAYER, PADDING, "gs://bucket/bench", **spec_fields)
    return ckptbench_object(spec_names.KIND, name, spec)


def rank_pod(
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
            "name": f"{bench}-rank-0-{rank}-abcde",
            "namespace": NS,
            "labels": render_labels.benchmark_labels(bench),
            "annotations": {render_labels.COMPLETION_INDEX_ANNOTATION: str(rank)},
        },
        "spec": {"containers": [{"name": rendering.CONTAINER_NAME, "image": IMAGE}]},
        "status": {
            "phase": phase,
            "containerStatuses": [
                {"name": rendering.CONTAINER_NAME, "state": {"terminated": terminated}}
            ],
        },
    }


def status_of(client: Client, name: str) -> dict[str, Any]:
    obj = client.get(CKB, spec_names.PLURAL, NS, name) or {}
    found: dict[str, Any] = obj.get("status") or {}
    return found


def phase_is(client: Client, name: str, phase: str) -> Callable[[], dict[str, Any] | None]:
    def probe() -> dict[str, Any] | None:
        status = status_of(client, name)
        return status if status.get("phase") == phase else None

    return probe


def jobset_posts(emulator: EmulatorThread) -> int:
    assert emulator.emulator is not None
    return sum(
        1
        for r in list(emulator.emulator._requests)
        if r.method == "POST" and r.resource is not None and r.resource.plural == "jobsets"
    )


def test_benchmark_runs_to_succeeded_with_aggregates_and_metrics(
    client: Client, operator: Operator
) -> None:
    created = client.create(CKB, spec_names.PLURAL, benchmark("ok"))
    jobset = wait_for("the JobSet", lambda: client.get(JOBSET, "jobsets", NS, "ok"))
    (owner,) = jobset["metadata"]["ownerReferences"]
    assert owner == render_labels.owner_reference("ok", created["metadata"]["uid"])
    assert jobset["metadata"]["labels"] == render_labels.benchmark_labels("ok")
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["parallelism"] == job["completions"] == WORLD
    container = job["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["CKPTBENCH_WORLD_SIZE"] == str(WORLD)
    assert env["CKPTBENCH_MASTER_ADDR"] == f"ok-rank-0-0.ok.{NS}.svc"
    assert container["image"] == IMAGE
    wait_for("status Pending", phase_is(client, "ok", "Pending"))

    for rank in range(WORLD):
        result = RankResult(
            rank=rank,
            bytes=sizes.shard_bytes(rank, WORLD, LAYER, PADDING),
            save=OpTiming.of([1.0 + rank / 10, 2.0 + rank / 10], [1.0, 2.0]),
            load=OpTiming.of([0.5, 0.5], [0.4, 0.4]),
            verified=True,
        )
        client.create(
            "v1", "pods", rank_pod("ok", rank, "Succeeded", result.to_termination_message(), 0)
        )

    status = wait_for("status Succeeded", phase_is(client, "ok", "Succeeded"))
    assert (status["ranksReported"], status["ranksExpected"], status["ranksSummary"]) == (
        4,
        4,
        "4/4",
    )
    assert status["checkpointBytes"] == sizes.total_bytes(LAYER, PADDING)
    # Per sample, a collective save lasts as long as its slowest rank: [1.3, 2.3] -> mean 1.8.
    assert status["save"]["meanSeconds"] == pytest.approx(1.8)
    assert status["load"]["meanSeconds"] == pytest.approx(0.5)
    assert status["verified"] is True
    complete = next(c for c in status["conditions"] if c["type"] == "Complete")
    assert complete["status"] == "True"

    labels = f'backend="gcs",name="ok",namespace="{NS}"'

    def metrics_show_results() -> bool:
        text = operator.metrics()
        save_mean = f'{labels},operation="save",statistic="mean"'
        return (
            f"ckptbench_benchmark_duration_seconds{{{save_mean}}} 1.8" in text
            and f'ckptbench_benchmark_phase{{{labels},phase="Succeeded"}} 1.0' in text
            and f'ckptbench_benchmark_ranks{{{labels},state="reported"}} 4.0' in text
        )

    wait_for("metrics of the run", metrics_show_results)
    assert 'ckptbench_operator_reconciles_total{handler="create"}' in operator.metrics()


def test_failed_rank_fails_the_benchmark_with_its_reason(
    client: Client, operator: Operator
) -> None:
    client.create(CKB, spec_names.PLURAL, benchmark("fails"))
    wait_for("the JobSet", lambda: client.get(JOBSET, "jobsets", NS, "fails"))
    error = "RendezvousTimeout: fails-rank-0-0.fails.default.svc:29500 did not answer in 600 s"
    message = RankResult(rank=2, error=error).to_termination_message()
    client.create("v1", "pods", rank_pod("fails", 2, "Failed", message, 3))
    status = wait_for("status Failed", phase_is(client, "fails", "Failed"))
    assert status["reason"] == "RendezvousTimeout"
    assert "rank 2 pod fails-rank-0-2-abcde failed with exit code 3" in status["failureReason"]
    assert status["failedPods"][0]["error"] == error


def test_invalid_spec_gets_a_condition_naming_the_field_and_no_jobset(
    client: Client, operator: Operator
) -> None:
    client.create(CKB, spec_names.PLURAL, benchmark("invalid", worldSize=0))
    status = wait_for("status Failed", phase_is(client, "invalid", "Failed"))
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert "spec.worldSize" in failed["message"]
    assert client.get(JOBSET, "jobsets", NS, "invalid") is None


def test_spec_edit_after_start_is_refused(client: Client, operator: Operator) -> None:
    client.create(CKB, spec_names.PLURAL, benchmark("edited"))
    wait_for("the JobSet", lambda: client.get(JOBSET, "jobsets", NS, "edited"))
    client.patch(CKB, spec_names.PLURAL, NS, "edited", {"spec": {"worldSize": 8}})

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
    assert status_of(client, "edited")["ranksExpected"] == WORLD  # the status follows what runs


def test_an_edit_that_fixes_an_invalid_spec_starts_the_run(
    client: Client, operator: Operator
) -> None:
    # No JobSet and no pods exist for an invalid spec, so no other event can wake the operator:
    # only the registered update handler (the resync is minutes away) acts on the edit.
    client.create(CKB, spec_names.PLURAL, benchmark("fixed", worldSize=0))
    wait_for("status Failed", phase_is(client, "fixed", "Failed"))
    assert client.get(JOBSET, "jobsets", NS, "fixed") is None
    client.patch(CKB, spec_names.PLURAL, NS, "fixed", {"spec": {"worldSize": WORLD}})

    jobset = wait_for("the JobSet", lambda: client.get(JOBSET, "jobsets", NS, "fixed"))
    assert jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == WORLD
    status = wait_for("status Pending", phase_is(client, "fixed", "Pending"))
    assert status["ranksExpected"] == WORLD
    assert 'ckptbench_operator_reconciles_total{handler="update"}' in operator.metrics()


def test_restart_creates_no_second_jobset(
    client: Client, operator: Operator, emulator: EmulatorThread
) -> None:
    client.create(CKB, spec_names.PLURAL, benchmark("before-restart"))
    wait_for("the JobSet", lambda: client.get(JOBSET, "jobsets", NS, "before-restart"))
    posts = jobset_posts(emulator)
    operator.stop()
    operator.start()
    # A benchmark created after the restart proves the new process is handling events, and the
    # resumed ones were reconciled before it (kopf resumes on its initial listing).
    client.create(CKB, spec_names.PLURAL, benchmark("after-restart"))
    wait_for("the JobSet", lambda: client.get(JOBSET, "jobsets", NS, "after-restart"))
    wait_for(
        "a reconcile of the resumed benchmark", lambda: 'handler="resume"' in operator.metrics()
    )
    assert jobset_posts(emulator) == posts + 1
    names = [j["metadata"]["name"] for j in client.list(JOBSET, "jobsets", NS)]
    assert sorted(names) == sorted(set(names))


def test_deleted_benchmark_loses_its_metric_series(client: Client, operator: Operator) -> None:
    client.create(CKB, spec_names.PLURAL, benchmark("deleted"))
    wait_for("its series", lambda: 'name="deleted"' in operator.metrics())
    client.delete(CKB, spec_names.PLURAL, NS, "deleted")
    wait_for("its series to go", lambda: 'name="deleted"' not in operator.metrics())
    assert client.get(CKB, spec_names.PLURAL, NS, "deleted") is None  # no finalizer held it up


def test_a_foreign_jobset_of_the_same_name_is_not_adopted(
    client: Client, operator: Operator
) -> None:
    stranger = {
        "apiVersion": JOBSET,
        "kind": "JobSet",
        "metadata": {
            "name": "taken",
            "namespace": NS,
            "labels": render_labels.benchmark_labels("taken"),
        },
        "spec": {"replicatedJobs": []},
    }
    client.create(JOBSET, "jobsets", stranger)
    client.create(CKB, spec_names.PLURAL, benchmark("taken"))
    status = wait_for("status ForeignJobSet", lambda: status_of(client, "taken").get("reason"))
    assert status == "ForeignJobSet"
    assert "has no controller owner" in status_of(client, "taken")["message"]
    jobset = client.get(JOBSET, "jobsets", NS, "taken")
    assert not jobset["metadata"].get("ownerReferences")  # not adopted
    assert jobset["spec"] == {"replicatedJobs": []}  # nor overwritten


def test_a_completed_jobset_with_missing_results_is_failed_not_succeeded(
    client: Client, operator: Operator
) -> None:
    client.create(CKB, spec_names.PLURAL, benchmark("silent"))
    wait_for("the JobSet", lambda: client.get(JOBSET, "jobsets", NS, "silent"))
    for rank in range(WORLD):
        client.create("v1", "pods", rank_pod("silent", rank, "Succeeded", None, 0))
    completed = {"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}
    client.patch(JOBSET, "jobsets", NS, "silent", {"status": {"conditions": [completed]}})
    status = wait_for("status Failed", phase_is(client, "silent", "Failed"))
    assert status["reason"] == "ResultsMissing"
    assert (
        f"{WORLD} of {WORLD} ranks left no readable result (ranks 0, 1, 2, 3)"
        in (status["message"])
    )
    complete = next(c for c in status["conditions"] if c["type"] == "Complete")
    assert complete["status"] == "False"


def test_resync_repairs_a_status_after_a_dropped_event(
    client: Client, emulator: EmulatorThread, tmp_path: Path
) -> None:
    # An operator of its own, resyncing often, on a namespace of its own.
    ns = "resync"
    with running_operator(
        emulator.url, tmp_path, ns, extra_args=["--resync-seconds", str(RESYNC_SECONDS)]
    ) as resyncing:
        body = benchmark("stale")
        body["metadata"]["namespace"] = ns

        def status() -> dict[str, Any]:
            found: dict[str, Any] = (client.get(CKB, spec_names.PLURAL, ns, "stale") or {}).get(
                "status"
            ) or {}
            return found

        client.create(CKB, spec_names.PLURAL, body)
        wait_for("status with its JobSet", lambda: status().get("jobSetName"))
        # Let the reconcile the JobSet's own event asks for pass first: it would repair too.
        jobset_reconciled = 'ckptbench_operator_reconciles_total{handler="jobset"} 1.0'
        wait_for("the JobSet event's reconcile", lambda: jobset_reconciled in resyncing.metrics())
        time.sleep(1)
        # A status edit triggers no handler: like a dropped event, only the resync notices it.
        client.patch(CKB, spec_names.PLURAL, ns, "stale", {"status": {"phase": "Succeeded"}})
        assert status()["phase"] == "Succeeded"
        wait_for(
            "the resync to repair it",
            lambda: status().get("phase") == "Pending",
            deadline=RESYNC_SECONDS * 10,
        )
        assert status()["reason"] == "PodsPending"
        assert 'ckptbench_operator_reconciles_total{handler="resync"}' in resyncing.metrics()


def events_of(client: Client, name: str) -> list[dict[str, Any]]:
    return [e for e in client.list("v1", "events", NS) if e["involvedObject"].get("name") == name]


def test_events_say_created_admitted_started_and_how_it_ended(
    client: Client, operator: Operator
) -> None:
    client.create(CKB, spec_names.PLURAL, benchmark("told"))
    wait_for("the JobSet", lambda: client.get(JOBSET, "jobsets", NS, "told"))
    running = rank_pod("told", 0, "Running", None, 0)
    running["status"] = {"phase": "Running"}
    client.create("v1", "pods", running)
    wait_for("status Running", phase_is(client, "told", "Running"))
    message = RankResult(rank=0, error="verification failed").to_termination_message()
    # One write: the pod fails with its message, as the kubelet reports it. A failure written
    # before its message let a reconcile in between name the failure PodFailed (a flaky test).
    failed = rank_pod("told", 0, "Failed", message, 1)["status"]
    client.patch("v1", "pods", NS, running["metadata"]["name"], {"status": failed})
    wait_for("status Failed", phase_is(client, "told", "Failed"))

    def reasons() -> list[str] | None:
        found = [e["reason"] for e in events_of(client, "told")]
        return found if len(found) >= 4 else None

    assert wait_for("four events", reasons) == [
        "JobSetCreated",
        "Admitted",
        "Started",
        "VerificationFailed",
    ]
    events = events_of(client, "told")
    assert [e["type"] for e in events] == ["Normal", "Normal", "Normal", "Warning"]
    uid = client.get(CKB, spec_names.PLURAL, NS, "told")["metadata"]["uid"]
    assert all(e["involvedObject"]["uid"] == uid for e in events)
    assert all(e["source"]["component"] == "ckptbench-operator" for e in events)


def test_watches_select_the_operators_objects_server_side(
    emulator: EmulatorThread, operator: Operator
) -> None:
    assert emulator.emulator is not None
    watches = [
        r
        for r in list(emulator.emulator._requests)
        if r.resource is not None
        and r.resource.plural in ("pods", "jobsets")
        and r.params.get("watch") == "true"
    ]
    assert {r.resource.plural for r in watches if r.resource is not None} == {"pods", "jobsets"}
    selector = "app.kubernetes.io/managed-by=ckptbench-operator,ckptbench.dev/benchmark"
    assert all(r.params.get("labelSelector") == selector for r in watches)


# What the admin of the policy test allows (chart values workload.allowed*), as operator flags.
ALLOWED_PREFIX, ALLOWED_ACCOUNT, ALLOWED_SECRET = "registry.example/team/", "ckpt-writer", "key"
POLICY_FLAGS = [
    f"--allow-image-prefix={ALLOWED_PREFIX}",
    f"--allow-service-account={ALLOWED_ACCOUNT}",
    f"--allow-secret={ALLOWED_SECRET}",
]
ESCALATIONS: dict[str, tuple[dict[str, Any], str, str]] = {
    # name: (spec fields, the field refused, what the message lists as allowed)
    "foreign-image": ({"image": "attacker.example/own:1"}, "spec.image", ALLOWED_PREFIX),
    "foreign-account": (
        {"serviceAccountName": "privileged-ksa"},
        "spec.serviceAccountName",
        ALLOWED_ACCOUNT,
    ),
    "secret-volume": (
        {"volumes": [{"name": "pw", "secret": {"secretName": "prod-db-password"}}]},
        "spec.volumes[0].secret.secretName",
        ALLOWED_SECRET,
    ),
}


def test_the_operator_refuses_what_the_admin_did_not_allow_and_creates_nothing(
    client: Client, emulator: EmulatorThread, tmp_path: Path
) -> None:
    ns = "policy"  # an operator of its own, with the admin's allow-lists as its chart passes them

    def create(name: str, **fields: Any) -> None:
        spec = reference_spec(WORLD, LAYER, PADDING, "gs://bucket/bench", **fields)
        client.create(CKB, spec_names.PLURAL, ckptbench_object(spec_names.KIND, name, spec, ns))

    def failed(name: str) -> Callable[[], dict[str, Any] | None]:
        def probe() -> dict[str, Any] | None:
            found = client.get(CKB, spec_names.PLURAL, ns, name) or {}
            status: dict[str, Any] = found.get("status") or {}
            return status if status.get("phase") == "Failed" else None

        return probe

    with running_operator(emulator.url, tmp_path, ns, extra_args=POLICY_FLAGS):
        for name, (fields, _, _) in ESCALATIONS.items():
            create(name, **fields)
        create(
            "allowed",
            image=f"{ALLOWED_PREFIX}ckptbench-workload:2",
            serviceAccountName=ALLOWED_ACCOUNT,
            volumes=[{"name": "k", "secret": {"secretName": ALLOWED_SECRET}}],
        )
        jobset = wait_for(
            "the allowed JobSet", lambda: client.get(JOBSET, "jobsets", ns, "allowed")
        )
        pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == ALLOWED_ACCOUNT
        assert pod["containers"][0]["image"] == f"{ALLOWED_PREFIX}ckptbench-workload:2"
        for name, (_, field, allowed) in ESCALATIONS.items():
            status = wait_for(f"{name} refused", failed(name))
            condition = next(c for c in status["conditions"] if c["type"] == "Failed")
            assert condition["reason"] == "InvalidSpec", condition
            message = condition["message"]
            assert f"{field}: " in message and "not allowed by the operator's policy" in message
            assert "(allowed: " in message and allowed in message, message
            assert client.get(JOBSET, "jobsets", ns, name) is None, f"{name}: a JobSet was made"


def pod_lists(emulator: EmulatorThread, bench: str) -> int:
    """The reads of ``bench``'s pods by a list call of their own (not kopf's watch of all)."""
    assert emulator.emulator is not None
    selector = render_labels.benchmark_selector(bench)
    return sum(
        1
        for r in list(emulator.emulator._requests)
        if r.method == "GET"
        and r.resource is not None
        and r.resource.plural == "pods"
        and r.params.get("labelSelector") == selector
    )


def test_pods_are_read_from_the_watch_fed_index_changes_and_deletions_alike(
    client: Client, operator: Operator, emulator: EmulatorThread
) -> None:
    client.create(CKB, spec_names.PLURAL, benchmark("indexed"))
    wait_for("the JobSet", lambda: client.get(JOBSET, "jobsets", NS, "indexed"))
    running = rank_pod("indexed", 0, "Running", None, 0)
    running["status"] = {"phase": "Running"}
    client.create("v1", "pods", running)
    results = {
        rank: RankResult(
            rank=rank,
            bytes=sizes.shard_bytes(rank, WORLD, LAYER, PADDING),
            save=OpTiming.of([1.0, 2.0], [1.0, 2.0]),
            load=OpTiming.of([0.5, 0.5], [0.4, 0.4]),
            verified=True,
        ).to_termination_message()
        for rank in range(WORLD)
    }
    for rank in range(1, WORLD):
        client.create("v1", "pods", rank_pod("indexed", rank, "Succeeded", results[rank], 0))
    wait_for("three ranks reported", lambda: status_of(client, "indexed").get("ranksReported") == 3)
    # A pod that changes (rank 0 finishes): the index holds the new pod, the status follows.
    finished = rank_pod("indexed", 0, "Succeeded", results[0], 0)
    name = finished["metadata"]["name"]
    client.patch("v1", "pods", NS, name, {"status": finished["status"]})
    wait_for("status Succeeded", phase_is(client, "indexed", "Succeeded"))
    # A pod deleted: its result leaves the index, and the status with it.
    gone = rank_pod("indexed", WORLD - 1, "Succeeded", None, 0)["metadata"]["name"]
    client.delete("v1", "pods", NS, gone)
    status = wait_for(
        "the deleted rank gone from the status",
        lambda: (s := status_of(client, "indexed")).get("ranksReported") == WORLD - 1 and s,
    )
    assert status["phase"] != "Succeeded"
    # Every read of the pods came from the watch: the operator listed none of them itself.
    assert pod_lists(emulator, "indexed") == 0
