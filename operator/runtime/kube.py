"""The few Kubernetes API calls the operator makes, as plain dicts in and out.

Responses are read as raw JSON (``_preload_content=False``): the objects stay in the API's
camelCase form that the pure status code reads, and a thousand pods are not turned into client
model objects on every reconcile. The calls block; the handlers run them in a thread.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import kubernetes
import yaml
from kubernetes.client.exceptions import ApiException

from ckptbench.operator.data import names as data_names
from ckptbench.operator.render.labels import (
    JOBSET_API_VERSION,
    LABEL_KIND,
    benchmark_labels,
    benchmark_selector,
    jobset_name,
)
from ckptbench.operator.spec import names
from ckptbench.operator.sweep.cells import LABEL_SWEEP
from ckptbench.operator.sweep.kinds import CHECKPOINT_SWEEP, SweepKind

JOBSET_GROUP, JOBSET_VERSION = JOBSET_API_VERSION.split("/")
JOBSET_PLURAL = "jobsets"
EVENT_SOURCE = "ckptbench-operator"


class NoCredentials(RuntimeError):
    """Neither a pod's service account nor a kubeconfig; the message says where it looked."""


def load_config() -> kubernetes.client.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG)."""
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
    except kubernetes.config.ConfigException:
        try:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        except (kubernetes.config.ConfigException, OSError, yaml.YAMLError) as exc:
            where = os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise NoCredentials(
                f"no cluster to run against: not in a pod (no service account token) and no "
                f"usable kubeconfig at {where} ({exc})"
            ) from None
    return kubernetes.client.ApiClient(configuration)


# (group, version, plural) of each custom resource the operator reads or writes.
Resource = tuple[str, str, str]
BENCHMARKS: Resource = (names.GROUP, names.VERSION, names.PLURAL)
DATA_BENCHMARKS: Resource = (names.GROUP, names.VERSION, data_names.PLURAL)
JOBSETS: Resource = (JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL)
# kopf's peering objects (kopf.dev/v1), read to know whether this replica leads (runtime/peering).
PEERING_GROUP, PEERING_VERSION = "kopf.dev", "v1"
PEERINGS, CLUSTER_PEERINGS = "kopfpeerings", "clusterkopfpeerings"


@dataclass(frozen=True)
class Served:
    """A kind of benchmark the API calls are about: its resource, and the kind label its pods
    carry (a CheckpointBenchmark's carry none)."""

    kind: str
    resource: Resource
    pod_kind: str | None


CHECKPOINTS = Served(names.KIND, BENCHMARKS, None)
DATA = Served(data_names.KIND, DATA_BENCHMARKS, data_names.KIND)


class Kube:
    """The API as one kind of benchmark's reconciles see it (``served``), and one sweep kind's
    (``sweeps``: its sweeps, and its children in the child kind's plural)."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        served: Served = CHECKPOINTS,
        sweeps: SweepKind = CHECKPOINT_SWEEP,
    ) -> None:
        self._custom = kubernetes.client.CustomObjectsApi(api_client)
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._served = served
        self._sweeps: Resource = (names.GROUP, names.VERSION, sweeps.plural)
        self._children: Resource = (names.GROUP, names.VERSION, sweeps.child.plural)

    # -- custom objects, whichever the resource ------------------------------------------------

    def _get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        group, version, plural = resource
        return _or_none(
            lambda: self._custom.get_namespaced_custom_object(
                group, version, namespace, plural, name, _preload_content=False
            )
        )

    def _create(
        self, resource: Resource, namespace: str, body: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Create the object; None when it already exists (409 AlreadyExists: an earlier
        reconcile or operator made it), which counts as success: the caller reads that one."""
        group, version, plural = resource
        try:
            response = self._custom.create_namespaced_custom_object(
                group, version, namespace, plural, dict(body), _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise
        return _json(response)

    def _patch_status(
        self, resource: Resource, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> None:
        """A JSON merge patch of the status subresource (None values remove keys)."""
        group, version, plural = resource
        self._custom.patch_namespaced_custom_object_status(
            group, version, namespace, plural, name, {"status": dict(patch)}, _preload_content=False
        )

    # -- benchmarks ------------------------------------------------------------------------------

    def get_benchmark(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(self._served.resource, namespace, name)

    def list_benchmarks(self, namespace: str | None) -> list[tuple[str, str]]:
        """(namespace, name) of every benchmark in ``namespace`` (None: every namespace)."""
        group, version, plural = self._served.resource
        if namespace is None:
            response = self._custom.list_cluster_custom_object(
                group, version, plural, _preload_content=False
            )
        else:
            response = self._custom.list_namespaced_custom_object(
                group, version, namespace, plural, _preload_content=False
            )
        found = []
        for item in _json(response).get("items") or []:
            meta = item.get("metadata") or {}
            if meta.get("namespace") and meta.get("name"):
                found.append((str(meta["namespace"]), str(meta["name"])))
        return found

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self._patch_status(self._served.resource, namespace, name, patch)

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(JOBSETS, namespace, jobset_name(name))

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        return self._create(JOBSETS, namespace, body)

    def list_pods(self, namespace: str, benchmark: str) -> list[dict[str, Any]]:
        """The benchmark's pods. The selector is applied again here: a server (or emulator) that
        ignores it must not mix another benchmark's ranks into this one's status; nor are a
        same-named benchmark of another kind's pods this one's."""
        response = self._core.list_namespaced_pod(
            namespace, label_selector=benchmark_selector(benchmark), _preload_content=False
        )
        return [
            pod
            for pod in _labelled(_json(response), benchmark_labels(benchmark))
            if ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_KIND)
            == self._served.pod_kind
        ]

    def get_peering(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        """kopf's peering object: the namespace's KopfPeering, or (None) the ClusterKopfPeering."""
        if namespace is not None:
            return self._get((PEERING_GROUP, PEERING_VERSION, PEERINGS), namespace, name)
        return _or_none(
            lambda: self._custom.get_cluster_custom_object(
                PEERING_GROUP, PEERING_VERSION, CLUSTER_PEERINGS, name, _preload_content=False
            )
        )

    # -- sweeps ------------------------------------------------------------------------------------

    def get_sweep(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(self._sweeps, namespace, name)

    def list_sweep_children(self, namespace: str, sweep: str) -> list[dict[str, Any]]:
        """The child benchmarks labelled with ``sweep``; the label is checked again here, as for
        pods."""
        group, version, plural = self._children
        response = self._custom.list_namespaced_custom_object(
            group,
            version,
            namespace,
            plural,
            label_selector=f"{LABEL_SWEEP}={sweep}",
            _preload_content=False,
        )
        return _labelled(_json(response), {LABEL_SWEEP: sweep})

    def create_benchmark(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Create a sweep's child; None when it already exists (a reconcile before made it)."""
        return self._create(self._children, namespace, body)

    def delete_benchmark(self, namespace: str, name: str) -> None:
        group, version, plural = self._children
        try:
            self._custom.delete_namespaced_custom_object(
                group, version, namespace, plural, name, _preload_content=False
            )
        except ApiException as exc:
            if exc.status != 404:  # already gone (the garbage collector was first)
                raise

    def patch_sweep_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self._patch_status(self._sweeps, namespace, name, patch)

    def post_event(
        self, benchmark: Mapping[str, Any], type_: str, reason: str, message: str, now: str
    ) -> None:
        """A core/v1 Event about the benchmark, as `kubectl describe ckb` (or `dlb`) lists them."""
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
                "kind": self._served.kind,
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


def _json(response: Any) -> dict[str, Any]:
    data = json.loads(response.data)
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object from the API server, got {type(data).__name__}")
    return data


def _labelled(listing: Mapping[str, Any], wanted: Mapping[str, str]) -> list[dict[str, Any]]:
    """The items of a list response that carry every label of ``wanted``."""

    def labels(item: Mapping[str, Any]) -> Mapping[str, Any]:
        return dict((item.get("metadata") or {}).get("labels") or {})

    items = listing.get("items") or []
    return [item for item in items if all(labels(item).get(k) == v for k, v in wanted.items())]


def _or_none(call: Any) -> dict[str, Any] | None:
    try:
        return _json(call())
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
