"""A kmock Kubernetes API emulator fit for a real kopf operator, and a small client for tests.

kmock 0.8 stores objects as given: it sets no uid, resourceVersion, creationTimestamp or
generation, which kopf and owner references rely on, so :class:`ClusterEmulator` fills them in.
Resources must be declared (creating a CRD object registers nothing). Label selectors are not
applied and nothing is garbage-collected: the operator filters by label itself.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kmock

from ckptbench.operator.data import names as data_names
from ckptbench.operator.spec import names as spec_names
from ckptbench.operator.sweep.kinds import SWEEP_KINDS

ALL_VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete"})
READ_VERBS = frozenset({"get", "list", "watch"})


def _resource(
    kind: str,
    *shortnames: str,
    namespaced: bool = True,
    status: bool = True,
    verbs: frozenset[str] = ALL_VERBS,
) -> kmock.ResourceInfo:
    """A resource as discovery describes it; singular is the kind in lower case, as for all of
    these."""
    return kmock.ResourceInfo(
        kind=kind,
        singular=kind.lower(),
        shortnames=set(shortnames),
        namespaced=namespaced,
        subresources={"status"} if status else set(),
        verbs=set(verbs),
    )


RESOURCES: dict[str, kmock.ResourceInfo] = {
    f"{spec_names.GROUP}/{spec_names.VERSION}/{spec_names.PLURAL}": _resource(
        spec_names.KIND, spec_names.SHORT_NAME
    ),
    **{
        f"{spec_names.GROUP}/{spec_names.VERSION}/{sweep.plural}": _resource(
            sweep.kind, sweep.short_name
        )
        for sweep in SWEEP_KINDS
    },
    f"{spec_names.GROUP}/{spec_names.VERSION}/{data_names.PLURAL}": _resource(
        data_names.KIND, data_names.SHORT_NAME
    ),
    "jobset.x-k8s.io/v1alpha2/jobsets": _resource("JobSet"),
    "v1/pods": _resource("Pod"),
    # kopf's resource observer waits for this resource to exist in discovery.
    "apiextensions.k8s.io/v1/customresourcedefinitions": _resource(
        "CustomResourceDefinition", namespaced=False, status=False, verbs=READ_VERBS
    ),
    # kopf waits for namespaces in discovery even when it is given exact namespaces (it does not
    # list them then; kmock 0.8 answers a namespace listing with 500).
    "v1/namespaces": _resource("Namespace", namespaced=False, status=False, verbs=READ_VERBS),
    "v1/events": _resource("Event", status=False),
    # kopf's peering objects, for replicas started with --peering (kopf's CRD has no status
    # subresource: each replica merges its keep-alive into the status of the object itself).
    "kopf.dev/v1/kopfpeerings": _resource("KopfPeering", status=False),
}


class ClusterEmulator(kmock.KubernetesEmulator):
    """Adds the metadata a real API server sets: uid, resourceVersion, generation, timestamp."""

    _versions = itertools.count(1)

    async def _handle(self, request: kmock.Request) -> Any:
        data = request.data
        if request.resource is not None and isinstance(data, dict):
            meta = data.setdefault("metadata", {})
            if request.action == kmock.action.CREATE:
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("generation", 1)
                meta.setdefault(
                    "creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                )
                if request.namespace:
                    meta.setdefault("namespace", request.namespace)
                meta["resourceVersion"] = str(next(self._versions))
            elif request.action == kmock.action.UPDATE and request.name is not None:
                key = (request.resource, request.namespace, request.name)
                if key in self.objects and not self.objects[key].deleted:
                    if "spec" in data and request.subresource is None:
                        current = self.objects[key].get("metadata", {}).get("generation", 1)
                        meta["generation"] = int(current) + 1
                    meta["resourceVersion"] = str(next(self._versions))
        return await super()._handle(request)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EmulatorThread:
    """The emulator served on 127.0.0.1 from its own event loop, so sync tests can drive it."""

    def __init__(self) -> None:
        self.port = 0
        self.emulator: ClusterEmulator | None = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kmock", daemon=True)

    def start(self) -> EmulatorThread:
        self._thread.start()
        if not self._ready.wait(timeout=20):
            raise RuntimeError("the kmock emulator did not start within 20 s")
        if self._error is not None:
            raise RuntimeError("the kmock emulator failed to start") from self._error
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=20)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with ClusterEmulator() as emulator, kmock.Server(emulator) as server:
            for key, info in RESOURCES.items():
                emulator.resources[key] = info
            self.emulator = emulator
            self.port = server.port
            self._ready.set()
            await self._stop.wait()


def write_kubeconfig(
    path: Path, url: str, namespace: str = "default", token: str = "kmock-test-token"
) -> Path:
    """A kubeconfig for the emulator; ``token`` tells one client's requests from another's in
    the emulator's request log (kmock checks none)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kmock", "cluster": {"server": url}}],
        "users": [{"name": "kmock", "user": {"token": token}}],
        "contexts": [
            {
                "name": "kmock",
                "context": {"cluster": "kmock", "user": "kmock", "namespace": namespace},
            }
        ],
        "current-context": "kmock",
    }
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


class Client:
    """Just enough of a Kubernetes client for the tests: plain JSON over HTTP."""

    def __init__(self, url: str) -> None:
        self.url = url

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {
            "Content-Type": "application/merge-patch+json"
            if method == "PATCH"
            else "application/json"
        }
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    @staticmethod
    def path(api_version: str, plural: str, namespace: str, name: str | None = None) -> str:
        root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        tail = f"/{name}" if name else ""
        return f"{root}/namespaces/{namespace}/{plural}{tail}"

    def create(self, api_version: str, plural: str, obj: dict[str, Any]) -> Any:
        namespace = obj["metadata"].get("namespace", "default")
        return self.request("POST", self.path(api_version, plural, namespace), obj)

    def get(self, api_version: str, plural: str, namespace: str, name: str) -> Any:
        return self.request("GET", self.path(api_version, plural, namespace, name))

    def list(self, api_version: str, plural: str, namespace: str) -> list[dict[str, Any]]:
        listing = self.request("GET", self.path(api_version, plural, namespace))
        return list((listing or {}).get("items") or [])

    def patch(self, api_version: str, plural: str, namespace: str, name: str, body: Any) -> Any:
        return self.request("PATCH", self.path(api_version, plural, namespace, name), body)

    def delete(self, api_version: str, plural: str, namespace: str, name: str) -> Any:
        return self.request("DELETE", self.path(api_version, plural, namespace, name))


@contextmanager
def running_emulator() -> Iterator[EmulatorThread]:
    emulator = EmulatorThread().start()
    try:
        yield emulator
    finally:
        emulator.stop()
