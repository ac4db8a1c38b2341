"""One reconcile against a recording stand-in for the API: creation, 409s, foreign JobSets."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from ckptbench.operator.render.jobset import RenderDefaults, render_jobset
from ckptbench.operator.runtime import kube
from ckptbench.operator.runtime.reconcile import (
    RENDERED_SPEC_ANNOTATION,
    Reconciler,
    reconcile_once,
)
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec, canonical_json
from ckptbench.operator.status import pods as status_pods
from ckptbench.workload.contract.checkpoint import sizes
from harness import rank_pods

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
NS, NAME, UID = "team-a", "bench", "uid-1"
SPEC = {"checkpointPath": "gs://bucket/x", "worldSize": 2, "image": "img:1"}
DEFAULTS = RenderDefaults(image="img:1")
# What each of SPEC's two ranks saves (the reference layout: 196 tensors of 400,000,000 bytes).
SHARD = sizes.shard_bytes(0, 2, 100_000, 196)


def owned_jobset() -> dict[str, Any]:
    spec = CheckpointBenchmarkSpec.model_validate(SPEC)
    body = render_jobset(NAME, NS, UID, spec, DEFAULTS)
    body["metadata"]["annotations"][RENDERED_SPEC_ANNOTATION] = canonical_json(spec)
    return body


class FakeApi:
    """The reconcile's API: a benchmark, maybe a JobSet, and what was called."""

    def __init__(self, jobset: dict[str, Any] | None, create_conflicts: bool = False) -> None:
        self.jobset = jobset
        self.create_conflicts = create_conflicts
        self.calls: list[str] = []
        self.status: dict[str, Any] = {}
        self.events: list[tuple[str, str, str]] = []

    def get_benchmark(self, namespace: str, name: str) -> dict[str, Any] | None:
        meta = {"name": name, "namespace": namespace, "uid": UID, "generation": 1}
        return {"metadata": meta, "spec": SPEC, "status": self.status}

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append("get_jobset")
        return self.jobset

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        self.calls.append("create_jobset")
        if self.create_conflicts:
            self.jobset = owned_jobset()  # another reconcile made it first
            return None
        self.jobset = dict(body)
        return self.jobset

    def list_pods(self, namespace: str, benchmark: str) -> list[dict[str, Any]]:
        self.calls.append("list_pods")
        return []

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.status = {k: v for k, v in {**self.status, **patch}.items() if v is not None}

    def list_benchmarks(self, namespace: str | None) -> list[tuple[str, str]]:
        return [(NS, NAME)]

    def post_event(
        self, benchmark: Mapping[str, Any], type_: str, reason: str, message: str, now: str
    ) -> None:
        self.events.append((type_, reason, message))


def test_a_conflict_on_creation_reads_the_existing_jobset() -> None:
    api = FakeApi(None, create_conflicts=True)
    outcome = reconcile_once(api, DEFAULTS, NS, NAME, NOW)
    assert outcome is not None and not outcome.created_jobset
    assert api.calls == ["get_jobset", "create_jobset", "get_jobset", "list_pods"]
    assert outcome.status.job_set_name == NAME
    assert outcome.status.phase == "Pending"


@pytest.mark.parametrize(
    ("owners", "whose"),
    [
        ([], "has no controller owner"),
        (
            [{"kind": "CheckpointBenchmark", "name": NAME, "uid": "old", "controller": True}],
            "is controlled by CheckpointBenchmark bench (uid old)",
        ),
    ],
    ids=["ownerless", "an-earlier-benchmark"],
)
def test_a_foreign_jobset_is_not_adopted(owners: list[dict[str, Any]], whose: str) -> None:
    foreign = owned_jobset()
    foreign["metadata"]["ownerReferences"] = owners
    api = FakeApi(foreign)
    outcome = reconcile_once(api, DEFAULTS, NS, NAME, NOW)
    assert outcome is not None
    assert api.calls == ["get_jobset"]  # neither created over it nor its pods read
    assert outcome.status.reason == "ForeignJobSet"
    assert whose in (outcome.status.message or "")
    assert foreign["metadata"]["ownerReferences"] == owners


class StubCustomObjects:
    def __init__(self, status: int) -> None:
        self.status = status

    def create_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        raise ApiException(status=self.status, reason="stub")


def test_kube_treats_409_on_jobset_creation_as_already_done() -> None:
    api = kube.Kube.__new__(kube.Kube)
    api._custom = StubCustomObjects(409)  # type: ignore[assignment]
    assert api.create_jobset(NS, owned_jobset()) is None
    api._custom = StubCustomObjects(500)  # type: ignore[assignment]
    with pytest.raises(ApiException):
        api.create_jobset(NS, owned_jobset())


class BrokenPods(FakeApi):
    def list_pods(self, namespace: str, benchmark: str) -> list[dict[str, Any]]:
        raise RuntimeError("the API server said 500")


async def test_a_failed_reconcile_is_counted_and_surfaced_as_a_condition() -> None:
    api = BrokenPods(owned_jobset())
    reconciler = Reconciler(api=api, defaults=DEFAULTS, clock=lambda: NOW)
    with pytest.raises(RuntimeError):
        await reconciler.reconcile(NS, NAME, "resync")
    error = next(c for c in api.status["conditions"] if c["type"] == "ReconcileError")
    assert (error["status"], error["reason"]) == ("True", "ReconcileFailed")
    assert "RuntimeError: the API server said 500" in error["message"]
    # The next reconcile that succeeds says so.
    healed = FakeApi(owned_jobset())
    healed.status = api.status
    await Reconciler(api=healed, defaults=DEFAULTS, clock=lambda: NOW).reconcile(NS, NAME, "pod")
    error = next(c for c in healed.status["conditions"] if c["type"] == "ReconcileError")
    assert (error["status"], error["reason"]) == ("False", "Reconciled")


async def test_resync_reconciles_every_listed_benchmark() -> None:
    api = FakeApi(owned_jobset())
    reconciler = Reconciler(
        api=api, defaults=DEFAULTS, clock=lambda: NOW, debounce_seconds=0, namespaces=(NS,)
    )
    await reconciler.resync_once()
    await asyncio.gather(*reconciler._tasks)
    assert api.status["phase"] == "Pending"
    assert "list_pods" in api.calls


def test_events_follow_the_status_once_per_change() -> None:
    api = FakeApi(None)
    reconcile_once(api, DEFAULTS, NS, NAME, NOW)
    assert [reason for _, reason, _ in api.events] == ["JobSetCreated", "Admitted"]
    reconcile_once(api, DEFAULTS, NS, NAME, NOW)
    assert len(api.events) == 2  # nothing new, nothing said


async def test_a_deleted_benchmark_is_forgotten_and_one_recreated_starts_fresh() -> None:
    api = FakeApi(None)
    reconciler = Reconciler(api=api, defaults=DEFAULTS, clock=lambda: NOW)
    key = (NS, NAME)
    await reconciler.reconcile(NS, NAME, "create")
    first_lock = reconciler.lock(key)
    await reconciler.forget(NS, NAME)
    assert key not in reconciler._locks
    # Re-created under the same name: a JobSet of its own and a status computed anew.
    again = FakeApi(None)
    reconciler.api = again
    outcome = await reconciler.reconcile(NS, NAME, "create")
    assert outcome is not None and outcome.created_jobset
    assert [reason for _, reason, _ in again.events] == ["JobSetCreated", "Admitted"]
    assert reconciler.lock(key) is not first_lock
    await reconciler.forget(NS, NAME)
    # Objects come and go for the operator's lifetime: what it keeps must not grow with them.
    for i in range(50):
        await reconciler.reconcile(NS, f"{NAME}-{i}", "create")
        await reconciler.forget(NS, f"{NAME}-{i}")
    assert reconciler._locks == {} and reconciler._memos == {}


class Finished(FakeApi):
    """Its two ranks have finished and reported."""

    def list_pods(self, namespace: str, benchmark: str) -> list[dict[str, Any]]:
        self.calls.append("list_pods")
        return [
            rank_pods.rank_pod(
                NAME, rank, rank_pods.rank_result(rank, SHARD).to_termination_message()
            )
            for rank in range(2)
        ]


async def test_the_reconciler_keeps_what_each_benchmark_read_until_it_is_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[str] = []
    real = status_pods.read_message

    def reading(text: str) -> status_pods.Read:
        read.append(text)
        return real(text)

    monkeypatch.setattr(status_pods, "read_message", reading)
    api = Finished(owned_jobset())
    reconciler = Reconciler(api=api, defaults=DEFAULTS, clock=lambda: NOW)
    for _ in range(3):
        await reconciler.reconcile(NS, NAME, "pod")
    assert api.status["phase"] == "Succeeded"
    assert len(read) == 2  # each rank's message read once, over three reconciles
    await reconciler.forget(NS, NAME)
    await reconciler.reconcile(NS, NAME, "pod")
    assert len(read) == 4  # forgotten: read anew


async def test_with_a_pod_index_the_pods_are_read_from_it_not_listed() -> None:
    api = Finished(owned_jobset())
    index = {(NS, NAME): [status_pods.kept(pod) for pod in api.list_pods(NS, NAME)]}
    api.calls.clear()
    reconciler = Reconciler(api=api, defaults=DEFAULTS, clock=lambda: NOW, pod_index=index)
    await reconciler.reconcile(NS, NAME, "pod")
    assert "list_pods" not in api.calls
    assert api.status["phase"] == "Succeeded"
    # The same status as from the pods listed whole: what the index keeps is all that is read.
    listed = Finished(owned_jobset())
    await Reconciler(api=listed, defaults=DEFAULTS, clock=lambda: NOW).reconcile(NS, NAME, "pod")
    assert listed.status == api.status


async def test_a_replica_that_does_not_lead_resyncs_nothing() -> None:
    api = FakeApi(owned_jobset())
    asked: list[str | None] = []

    async def leading(namespace: str | None) -> bool:
        asked.append(namespace)
        return False

    reconciler = Reconciler(
        api=api,
        defaults=DEFAULTS,
        clock=lambda: NOW,
        debounce_seconds=0,
        namespaces=(NS,),
        leading=leading,
    )
    await reconciler.resync_once()
    await asyncio.gather(*reconciler._tasks)
    assert asked == [NS]
    assert api.calls == [] and api.status == {}
