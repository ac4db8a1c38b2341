"""The few Kubernetes API calls the operator makes, as plain dicts in and out.

Responses are read as raw JSON (``_preload_content=False``): the objects stay in the API's
camelCase form that the pure status code reads, and a thousand pods are not turned into client
model objects on every reconcile. The calls block; the handlers run them in a thread.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, cast

import kubernetes
from kubernetes.client.exceptions import ApiException

from ckptbench.operator.render.labels import (
    JOBSET_API_VERSION,
    benchmark_labels,
    benchmark_selector,
    jobset_name,
)
from ckptbench.operator.spec import names
from ckptbench.operator.sweep import crd as sweep_crd
from ckptbench.operator.sweep.cells import LABEL_SWEEP

JOBSET_GROUP, JOBSET_VERSION = JOBSET_API_VERSION.split("/")
JOBSET_PLURAL = "jobsets"
EVENT_SOURCE = "ckptbench-operator"


def load_config() -> kubernetes.client.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG)."""
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
    return kubernetes.client.ApiClient(configuration)


class Kube:
    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self._custom = kubernetes.client.CustomObjectsApi(api_client)
        self._core = kubernetes.client.CoreV1Api(api_client)

    def get_benchmark(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _or_none(
            lambda: self._custom.get_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.PLURAL, name, _preload_content=False
            )
        )

    def list_benchmarks(self, namespace: str | None) -> list[tuple[str, str]]:
        """(namespace, name) of every benchmark in ``namespace`` (None: every namespace)."""
        if namespace is None:
            response = self._custom.list_cluster_custom_object(
                names.GROUP, names.VERSION, names.PLURAL, _preload_content=False
            )
        else:
            response = self._custom.list_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.PLURAL, _preload_content=False
            )
        found = []
        for item in _json(response).get("items") or []:
            meta = item.get("metadata") or {}
            if meta.get("namespace") and meta.get("name"):
                found.append((str(meta["namespace"]), str(meta["name"])))
        return found

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _or_none(
            lambda: self._custom.get_namespaced_custom_object(
                JOBSET_GROUP,
                JOBSET_VERSION,
                namespace,
                JOBSET_PLURAL,
                jobset_name(name),
                _preload_content=False,
            )
        )

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Create the JobSet; None when it already exists (an earlier reconcile or operator made
        it), which counts as success: the caller reads the existing one."""
        try:
            response = self._custom.create_namespaced_custom_object(
                JOBSET_GROUP,
                JOBSET_VERSION,
                namespace,
                JOBSET_PLURAL,
                dict(body),
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise
        return _json(response)

    def list_pods(self, namespace: str, benchmark: str) -> list[dict[str, Any]]:
        """The benchmark's pods. The selector is applied again here: a server (or emulator) that
        ignores it must not mix another benchmark's ranks into this one's status."""
        response = self._core.list_namespaced_pod(
            namespace, label_selector=benchmark_selector(benchmark), _preload_content=False
        )
        wanted = benchmark_labels(benchmark)
        items = _json(response).get("items") or []
        return [
            pod
            for pod in items
            if all(
                ((pod.get("metadata") or {}).get("labels") or {}).get(k) == v
                for k, v in wanted.items()
            )
        ]

    # -- sweeps ------------------------------------------------------------------------------------

    def get_sweep(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _or_none(
            lambda: self._custom.get_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                namespace,
                sweep_crd.PLURAL,
                name,
                _preload_content=False,
            )
        )

    def list_sweep_children(self, namespace: str, sweep: str) -> list[dict[str, Any]]:
        """The benchmarks labelled with ``sweep``; the label is checked again here, as for pods."""
        response = self._custom.list_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            names.PLURAL,
            label_selector=f"{LABEL_SWEEP}={sweep}",
            _preload_content=False,
        )
        items = _json(response).get("items") or []
        return [
            b
            for b in items
            if ((b.get("metadata") or {}).get("labels") or {}).get(LABEL_SWEEP) == sweep
        ]

    def create_benchmark(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Create a sweep's child; None when it already exists (a reconcile before made it)."""
        try:
            response = self._custom.create_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                namespace,
                names.PLURAL,
                dict(body),
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise
        return _json(response)

    def delete_benchmark(self, namespace: str, name: str) -> None:
        try:
            self._custom.delete_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.PLURAL, name, _preload_content=False
            )
        except ApiException as exc:
            if exc.status != 404:  # already gone (the garbage collector was first)
                raise

    def patch_sweep_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self._custom.patch_namespaced_custom_object_status(
            names.GROUP,
            names.VERSION,
            namespace,
            sweep_crd.PLURAL,
            name,
            {"status": dict(patch)},
            _preload_content=False,
        )

    def post_event(
        self, benchmark: Mapping[str, Any], type_: str, reason: str, message: str, now: str
    ) -> None:
        """A core/v1 Event about the benchmark, as `kubectl describe ckb` lists them."""
        meta = benchmark.get("metadata") or {}
        namespace = str(meta.get("namespace", ""))
        identity = f"{meta.get('uid')}/{reason}/{now}/{message}"
        suffix = hashlib.sha256(identity.encode()).hexdigest()[:16]
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            # Named as kubectl's events are (<object>.<unique suffix>), fixed by what it reports.
            "metadata": {"name": f"{meta.get('name')}.{suffix}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND,
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            # The API server refuses messages over 1 KiB.
            "message": message[:1024],
            "source": {"component": EVENT_SOURCE},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        # The client sends a plain dict as it is, like the custom-object calls here.
        self._core.create_namespaced_event(namespace, cast(Any, body), _preload_content=False)

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """A JSON merge patch of the status subresource (None values remove keys)."""
        self._custom.patch_namespaced_custom_object_status(
            names.GROUP,
            names.VERSION,
            namespace,
            names.PLURAL,
            name,
            {"status": dict(patch)},
            _preload_content=False,
        )


def _json(response: Any) -> dict[str, Any]:
    data = json.loads(response.data)
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object from the API server, got {type(data).__name__}")
    return data


def _or_none(call: Any) -> dict[str, Any] | None:
    try:
        return _json(call())
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
