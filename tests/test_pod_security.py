"""Rendered benchmark pods comply with the "restricted" Pod Security profile, control by control.

A namespace labelled ``pod-security.kubernetes.io/enforce: restricted`` admits them; each check
is also shown to catch a pod that breaks its control, so a passing check means something.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from ckptbench.operator.render.jobset import RenderDefaults, render_jobset
from ckptbench.operator.render.security import WORKLOAD_UID
from ckptbench.operator.spec.names import KIND
from ckptbench.operator.spec.parse import parse_spec
from ckptbench.operator.spec.policy import Policy
from tests.pod_security import RESTRICTED

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "registry.example/ckptbench-workload:1.0"
# The admin allows the Secret the every-volume-kind case mounts and the one the MinIO example
# names, and the workload service account the chart creates (workloadServiceAccount.create=true),
# which the examples name.
POLICY = Policy(
    image=IMAGE,
    service_accounts=frozenset({"ckptbench-workload"}),
    secrets=frozenset({"gcs-key", "minio-keys"}),
)
DEFAULTS = RenderDefaults(image=IMAGE, policy=POLICY)
EVERY_VOLUME_KIND = {
    "checkpointPath": "/data/ckpt",
    "backend": "file",
    "worldSize": 2,
    "volumes": [
        {"name": "shared", "persistentVolumeClaim": {"claimName": "rwx"}},
        {"name": "inline", "csi": {"driver": "gcsfuse.csi.storage.gke.io"}},
        {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "settings", "configMap": {"name": "bench"}},
        {"name": "key", "secret": {"secretName": "gcs-key"}},
    ],
    "volumeMounts": [{"name": "shared", "mountPath": "/data"}],
}


def _pods() -> dict[str, dict[str, Any]]:
    specs: dict[str, Any] = {"every-volume-kind": EVERY_VOLUME_KIND}
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == KIND:
                specs[f"{path.stem}/{doc['metadata']['name']}"] = doc["spec"]
    pods = {}
    for name, raw in specs.items():
        jobset = render_jobset("bench", "ns", "uid-1", parse_spec(raw), DEFAULTS)
        job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
        pods[name] = job["template"]["spec"]
    return pods


PODS = _pods()


@pytest.mark.parametrize("control", sorted(RESTRICTED))
@pytest.mark.parametrize("case", sorted(PODS))
def test_rendered_pods_comply_with_each_restricted_control(case: str, control: str) -> None:
    assert RESTRICTED[control](PODS[case]) == []


def _worker(pod: dict[str, Any]) -> dict[str, Any]:
    worker: dict[str, Any] = pod["containers"][0]
    return worker


def _ctx(pod: dict[str, Any]) -> dict[str, Any]:
    ctx: dict[str, Any] = _worker(pod)["securityContext"]
    return ctx


# One way to break each control, applied to a compliant rendered pod.
BREAKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "host-process": lambda p: _ctx(p).update(windowsOptions={"hostProcess": True}),
    "host-namespaces": lambda p: p.update(hostPID=True),
    "privileged-containers": lambda p: _ctx(p).update(privileged=True),
    "capabilities-baseline": lambda p: _ctx(p).update(capabilities={"add": ["SYS_ADMIN"]}),
    "host-path-volumes": lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    "host-ports": lambda p: _worker(p)["ports"][0].update(hostPort=29500),
    "app-armor": lambda p: _ctx(p).update(appArmorProfile={"type": "Unconfined"}),
    "se-linux": lambda p: _ctx(p).update(seLinuxOptions={"type": "spc_t"}),
    "proc-mount-type": lambda p: _ctx(p).update(procMount="Unmasked"),
    "sysctls": lambda p: p["securityContext"].update(
        sysctls=[{"name": "kernel.msgmax", "value": "1"}]
    ),
    "volume-types": lambda p: p["volumes"].append({"name": "n", "nfs": {"server": "x"}}),
    "privilege-escalation": lambda p: _ctx(p).pop("allowPrivilegeEscalation"),
    "running-as-non-root": lambda p: _ctx(p).update(runAsNonRoot=False),
    "running-as-non-root-user": lambda p: _ctx(p).update(runAsUser=0),
    "seccomp": lambda p: _ctx(p).update(seccompProfile={"type": "Unconfined"}),
    "capabilities-restricted": lambda p: _ctx(p).update(capabilities={"drop": ["NET_RAW"]}),
}


@pytest.mark.parametrize("control", sorted(RESTRICTED))
def test_each_control_catches_a_pod_that_breaks_it(control: str) -> None:
    pod = copy.deepcopy(PODS["every-volume-kind"])
    BREAKS[control](pod)
    assert RESTRICTED[control](pod) != []


def test_every_control_has_a_break() -> None:
    assert set(BREAKS) == set(RESTRICTED)


def test_pods_run_as_the_workload_images_user() -> None:
    dockerfile = (ROOT / "Dockerfile.workload").read_text()
    (user,) = re.findall(r"^USER (\d+):(\d+)$", dockerfile, re.MULTILINE)
    assert int(user[0]) == WORKLOAD_UID
    pod = PODS["every-volume-kind"]
    assert pod["securityContext"]["runAsUser"] == _ctx(pod)["runAsUser"] == WORKLOAD_UID
    assert _ctx(pod)["readOnlyRootFilesystem"] is True
    # A read-only root needs somewhere for temporary files.
    mounts = {m["mountPath"]: m["name"] for m in _worker(pod)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
