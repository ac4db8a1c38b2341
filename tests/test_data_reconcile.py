"""One reconcile of a DataLoadingBenchmark against a recording stand-in for the API: the
CheckpointBenchmark's steps with the data kind's parts (creation once, a 409 that finds our own
JobSet, a foreign JobSet refused, a spec edit reported), and the reconciler's bookkeeping."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from ckptbench.operator.data.model import parse_data_spec
from ckptbench.operator.data.render import data_labels, render_data_jobset
from ckptbench.operator.data.status import DataMemo
from ckptbench.operator.data.status_schema import DataLoadingStatus
from ckptbench.operator.render.jobset import RenderDefaults
from ckptbench.operator.render.labels import benchmark_labels
from ckptbench.operator.runtime import kube
from ckptbench.operator.runtime.data import metrics as data_metrics
from ckptbench.operator.runtime.data.kind import DATA
from ckptbench.operator.runtime.reconcile import (
    RENDERED_SPEC_ANNOTATION,
    Reconciler,
    reconcile_once,
)
from ckptbench.operator.runtime.series import REGISTRY
from ckptbench.operator.spec.model import canonical_json

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
NS, NAME, UID = "team-a", "reads", "uid-d"
SPEC: dict[str, Any] = {"dataPath": "gs://bucket/data", "worldSize": 2, "image": "img:1"}
DEFAULTS = RenderDefaults(image="img:1")


def owned_jobset(spec: Mapping[str, Any] = SPEC) -> dict[str, Any]:
    parsed = parse_data_spec(dict(spec))
    body = render_data_jobset(NAME, NS, UID, parsed, DEFAULTS)
    body["metadata"]["annotations"][RENDERED_SPEC_ANNOTATION] = canonical_json(parsed)
    return body


class FakeApi:
    """The data kind's API: a DataLoadingBenchmark, maybe a JobSet, and what was called."""

    def __init__(self, jobset: dict[str, Any] | None, create_conflicts: bool = False) -> None:
        self.jobset = jobset
        self.create_conflicts = create_conflicts
        self.spec: dict[str, Any] = dict(SPEC)
        self.calls: list[str] = []
        self.status: dict[str, Any] = {}
        self.events: list[tuple[str, str, str]] = []

    def get_benchmark(self, namespace: str, name: str) -> dict[str, Any] | None:
        meta = {"name": name, "namespace": namespace, "uid": UID, "generation": 1}
        return {"metadata": meta, "spec": self.spec, "status": self.status}

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
        return []

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.status = {k: v for k, v in {**self.status, **patch}.items() if v is not None}

    def list_benchmarks(self, namespace: str | None) -> list[tuple[str, str]]:
        return [(NS, NAME)]

    def post_event(
        self, benchmark: Mapping[str, Any], type_: str, reason: str, message: str, now: str
    ) -> None:
        self.events.append((type_, reason, message))


def test_the_first_reconcile_creates_the_data_jobset_once_and_a_typed_status() -> None:
    api = FakeApi(None)
    outcome = reconcile_once(api, DEFAULTS, NS, NAME, NOW, kind=DATA)
    assert outcome is not None and outcome.created_jobset
    assert isinstance(outcome.status, DataLoadingStatus)
    assert api.jobset is not None
    assert api.jobset["metadata"]["ownerReferences"][0]["kind"] == "DataLoadingBenchmark"
    assert api.status["phase"] == "Pending" and api.status["ranksExpected"] == 2
    assert (
        api.status["specHash"] == api.jobset["metadata"]["annotations"]["ckptbench.dev/spec-hash"]
    )
    assert [e[1] for e in api.events] == ["JobSetCreated", "Admitted"]  # no queue: it runs
    again = reconcile_once(api, DEFAULTS, NS, NAME, NOW, kind=DATA)
    assert again is not None and not again.created_jobset and not again.patched
    assert api.calls.count("create_jobset") == 1


def test_a_create_that_finds_our_jobset_already_there_is_success() -> None:
    api = FakeApi(None, create_conflicts=True)
    outcome = reconcile_once(api, DEFAULTS, NS, NAME, NOW, kind=DATA)
    assert outcome is not None and not outcome.created_jobset
    assert api.status["jobSetName"] == NAME
    assert api.status["reason"] == "PodsPending"


def test_a_foreign_jobset_is_refused_not_adopted() -> None:
    stranger = owned_jobset()
    stranger["metadata"]["ownerReferences"] = []
    api = FakeApi(stranger)
    outcome = reconcile_once(api, DEFAULTS, NS, NAME, NOW, kind=DATA)
    assert outcome is not None
    assert (api.status["phase"], api.status["reason"]) == ("Pending", "ForeignJobSet")
    assert "create_jobset" not in api.calls


def test_a_spec_edit_after_the_start_is_reported_and_the_status_follows_what_runs() -> None:
    api = FakeApi(owned_jobset())
    api.spec = {**SPEC, "worldSize": 4}
    reconcile_once(api, DEFAULTS, NS, NAME, NOW, kind=DATA)
    rejected = next(c for c in api.status["conditions"] if c["type"] == "SpecChangeRejected")
    assert rejected["status"] == "True" and "worldSize" in rejected["message"]
    assert api.status["ranksExpected"] == 2
    assert "create_jobset" not in api.calls


def test_an_invalid_data_spec_makes_no_jobset() -> None:
    api = FakeApi(None)
    api.spec = {**SPEC, "worldSize": 0}
    reconcile_once(api, DEFAULTS, NS, NAME, NOW, kind=DATA)
    assert (api.status["phase"], api.status["reason"]) == ("Failed", "InvalidSpec")
    assert "spec.worldSize" in api.status["message"]
    assert "create_jobset" not in api.calls


def test_the_data_reconciler_keeps_data_memos_counts_data_handlers_and_forgets_series() -> None:
    async def run() -> None:
        api = FakeApi(None)
        reconciler = Reconciler(api=api, defaults=DEFAULTS, clock=lambda: NOW, kind=DATA)
        await reconciler.reconcile(NS, NAME, "data-create")
        assert isinstance(reconciler._memos[(NS, NAME)], DataMemo)
        assert REGISTRY.get_sample_value(
            "ckptbench_data_ranks",
            {"namespace": NS, "name": NAME, "backend": "gcs", "state": "expected"},
        )
        requested: list[tuple[str, str, str]] = []
        reconciler.request = lambda *key: requested.append(key)  # type: ignore[method-assign]
        await reconciler.resync_once()
        assert requested == [(NS, NAME, "data-resync")]
        await reconciler.forget(NS, NAME)
        assert (NS, NAME) not in reconciler._memos
        assert (NS, NAME) not in data_metrics._series
        await reconciler.close()

    asyncio.run(run())


def test_a_create_that_finds_someone_else_s_jobset_refuses_it() -> None:
    api = FakeApi(None, create_conflicts=True)
    stranger = owned_jobset()
    stranger["metadata"]["ownerReferences"] = []

    def conflict(namespace: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        api.jobset = stranger  # a JobSet of the name appeared since the read: not ours
        return None

    api.create_jobset = conflict  # type: ignore[method-assign]
    reconcile_once(api, DEFAULTS, NS, NAME, NOW, kind=DATA)
    assert api.status["reason"] == "ForeignJobSet"
    assert "jobSetName" not in api.status


class StubCore:
    """The core API's pod listing, answering with pods of both kinds under one benchmark name
    (a server that ignores the label selector, as the emulator does)."""

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> Any:
        pods = [
            {"metadata": {"name": "ckpt", "labels": benchmark_labels(NAME)}},
            {"metadata": {"name": "data", "labels": data_labels(NAME)}},
        ]
        return SimpleNamespace(data=json.dumps({"items": pods}))


class StubCustom:
    def __init__(self) -> None:
        self.asked: list[tuple[Any, ...]] = []

    def get_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        self.asked.append(args)
        return SimpleNamespace(data=json.dumps({"metadata": {"name": args[-1]}}))


@pytest.mark.parametrize(("served", "pod"), [(kube.CHECKPOINTS, "ckpt"), (kube.DATA, "data")])
def test_each_kind_s_api_lists_its_own_pods_and_reads_its_own_resource(
    served: kube.Served, pod: str
) -> None:
    api = kube.Kube.__new__(kube.Kube)
    api._core = StubCore()  # type: ignore[assignment]
    custom = api._custom = StubCustom()  # type: ignore[assignment]
    api._served = served
    assert [p["metadata"]["name"] for p in api.list_pods(NS, NAME)] == [pod]
    api.get_benchmark(NS, NAME)
    assert custom.asked[0][3] == served.resource[2]
