"""CheckpointBenchmark -> JobSet, as a pure function of data (no kopf, no Kubernetes client).

The JobSet around the ranks (:func:`build_jobset`) is every kind's: a DataLoadingBenchmark's
(``operator/data/render.py``) differs only in what its ranks run (:class:`Ranks`).

One replicated job ``rank`` with one replica: an Indexed Job whose completion index is the rank.
JobSet gives every pod the hostname ``<name>-rank-0-<index>`` under the headless Service
``<name>``, so rank 0's fully qualified address is known before any pod exists.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel

from ckptbench.operator.render.labels import (
    COMPLETION_INDEX_ANNOTATION,
    JOBSET_API_VERSION,
    JOBSET_KIND,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    SPEC_HASH_ANNOTATION,
    benchmark_labels,
    jobset_name,
    master_addr,
    owner_reference,
    run_id,
)
from ckptbench.operator.render.liveness import HEARTBEAT_FILE, liveness_probe
from ckptbench.operator.render.resources import container_resources, planned_limit_bytes
from ckptbench.operator.render.security import (
    container_security_context,
    pod_security_context,
    tmp_mount,
    tmp_volume,
)
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec, canonical_json
from ckptbench.operator.spec.names import KIND, REPLICATED_JOB, validate_name
from ckptbench.operator.spec.pods import PodSpec
from ckptbench.operator.spec.policy import Policy
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.quantity import cpu_threads

CONTAINER_NAME = "worker"
WORKER_COMMAND = ("ckptbench", "worker")
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
# Read by OpenMP and by torch when it sizes its intra-op thread pool.
THREADS_ENV = "OMP_NUM_THREADS"


class RenderError(ValueError):
    """The benchmark cannot be rendered; the message names the field and the reason."""


@dataclass(frozen=True)
class RenderDefaults:
    """What the operator fills in when the spec leaves it out, and what its admin allows."""

    image: str | None = None
    image_pull_policy: str = "IfNotPresent"
    policy: Policy = field(default_factory=Policy)

    def __post_init__(self) -> None:
        # The default image is the chart's workload image: always allowed (also by digest).
        if self.policy.image is None and self.image is not None:
            object.__setattr__(self, "policy", replace(self.policy, image=self.image))


def spec_hash(spec: BaseModel) -> str:
    """A digest of the spec as rendered, so a changed spec can be told from the one that ran."""
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Ranks:
    """What a kind's ranks run, besides the pods' fields every kind shares (:class:`PodSpec`):
    rendered by each kind from its own config (``render_jobset`` here, the DataLoadingBenchmark's
    in ``operator/data/render.py``)."""

    kind: str  # of the owner
    count: int
    command: tuple[str, ...]
    env: dict[str, str]  # the config's CKPTBENCH_* round trip (contract/environment.py)
    port: int  # rank 0's rendezvous port
    termination_log: str | None
    progress_timeout_seconds: float
    resources: dict[str, Any]  # with the memory limit from the kind's plan
    spec_hash: str
    labels: dict[str, str]


def check_renderable(
    name: str, namespace: str, uid: str, spec: PodSpec, defaults: RenderDefaults
) -> str:
    """The image the ranks run, or :class:`RenderError` naming why nothing may be rendered: a bad
    name, no namespace or uid, no image, or a field the admin's policy refuses."""
    problem = validate_name(name)
    if problem:
        raise RenderError(problem)
    if not namespace:
        raise RenderError("metadata.namespace: must not be empty")
    if not uid:
        raise RenderError("metadata.uid: must not be empty")
    image = spec.image or defaults.image
    if not image:
        raise RenderError("spec.image: not set, and the operator has no default image")
    # Again, though parse_spec checked it with the same policy: nothing is created for a spec the
    # admin's policy refuses, however the spec was made.
    refused = defaults.policy.problems(spec)
    if refused:
        raise RenderError("; ".join(refused))
    return image


def render_jobset(
    name: str,
    namespace: str,
    uid: str,
    spec: CheckpointBenchmarkSpec,
    defaults: RenderDefaults,
    *,
    owner: bool = True,
) -> dict[str, Any]:
    """The JobSet that runs benchmark ``name``. ``owner=False`` leaves out the owner reference
    (for manifests applied without their CheckpointBenchmark)."""
    image = check_renderable(name, namespace, uid, spec, defaults)
    config = workload_config(name, namespace, uid, spec)
    ranks = Ranks(
        kind=KIND,
        # One pod per rank: worldSize, or loadWorldSize when the restore is onto more ranks.
        count=spec.rank_count,
        command=WORKER_COMMAND,
        env=config.to_env(),
        port=config.master_port,
        termination_log=config.termination_log,
        progress_timeout_seconds=config.progress_timeout_seconds,
        resources=container_resources(spec.resources, planned_limit_bytes(spec)),
        spec_hash=spec_hash(spec),
        labels=benchmark_labels(name),
    )
    return build_jobset(name, namespace, uid, spec, image, defaults, ranks, owner=owner)


def build_jobset(
    name: str,
    namespace: str,
    uid: str,
    spec: PodSpec,
    image: str,
    defaults: RenderDefaults,
    ranks: Ranks,
    *,
    owner: bool = True,
) -> dict[str, Any]:
    """The JobSet of ``ranks`` in pods as ``spec`` says, for a spec :func:`check_renderable`
    passed."""
    labels = ranks.labels
    jobset_labels = dict(labels)
    if spec.queue_name is not None:
        jobset_labels[KUEUE_QUEUE_LABEL] = spec.queue_name
    if spec.workload_priority_class_name is not None:
        jobset_labels[KUEUE_PRIORITY_LABEL] = spec.workload_priority_class_name

    metadata: dict[str, Any] = {
        "name": jobset_name(name),
        "namespace": namespace,
        "labels": jobset_labels,
        "annotations": {SPEC_HASH_ANNOTATION: ranks.spec_hash},
    }
    if owner:
        metadata["ownerReferences"] = [owner_reference(name, uid, ranks.kind)]

    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "parallelism": ranks.count,
        "completions": ranks.count,
        # A rank that fails fails the attempt; JobSet's maxRestarts decides about another one,
        # restarting all ranks together (a lone restarted rank could not rejoin the collective).
        "backoffLimit": 0,
        "template": {
            "metadata": {"labels": dict(labels)},
            "spec": _pod_spec(spec, image, defaults, ranks),
        },
    }
    if spec.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_seconds

    jobset_spec: dict[str, Any] = {
        "network": {
            "enableDNSHostnames": True,
            "subdomain": jobset_name(name),
            # Ranks resolve rank 0 before it is ready: that is what they wait for.
            "publishNotReadyAddresses": True,
        },
        "failurePolicy": {"maxRestarts": spec.max_restarts},
        "successPolicy": {"operator": "All", "targetReplicatedJobs": [REPLICATED_JOB]},
        "replicatedJobs": [
            {
                "name": REPLICATED_JOB,
                "replicas": 1,
                "template": {"metadata": {"labels": dict(labels)}, "spec": job_spec},
            }
        ],
    }
    if spec.queue_name is not None:
        # Kueue admits the workload by unsuspending it; the operator never touches suspend again.
        jobset_spec["suspend"] = True

    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": JOBSET_KIND,
        "metadata": metadata,
        "spec": jobset_spec,
    }


def workload_config(
    name: str, namespace: str, uid: str, spec: CheckpointBenchmarkSpec
) -> WorkloadConfig:
    """What every rank of the benchmark runs with; each pod sets its own rank. Every rank beats
    its heartbeat where the pod's liveness probe reads it."""
    config = spec.to_workload_config(
        run_id=run_id(name, uid), master_addr=master_addr(name, namespace)
    )
    return config.model_copy(update={"heartbeat_file": HEARTBEAT_FILE})


def _pod_spec(spec: PodSpec, image: str, defaults: RenderDefaults, ranks: Ranks) -> dict[str, Any]:
    env: list[dict[str, Any]] = [
        {"name": key, "value": value} for key, value in sorted(ranks.env.items())
    ]
    env += [
        # JOB_COMPLETION_INDEX carries the same number; naming it explicitly keeps the rank
        # visible in the pod spec and independent of the Job controller's env injection.
        _field_env("CKPTBENCH_RANK", f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"),
        _field_env("NODE_NAME", "spec.nodeName"),
        _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
    ]
    if spec.s3_credentials_secret is not None:
        env += s3_credentials_env(spec.s3_credentials_secret)
    threads = intra_op_threads(spec.resources)
    if threads is not None:
        env.append({"name": THREADS_ENV, "value": str(threads)})
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": spec.image_pull_policy or defaults.image_pull_policy,
        "command": list(ranks.command),
        "env": env,
        "ports": [{"name": "rendezvous", "containerPort": ranks.port, "protocol": "TCP"}],
        "terminationMessagePath": ranks.termination_log or TERMINATION_MESSAGE_PATH,
        # A rank that crashes before writing its result still leaves the tail of its log.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    container["livenessProbe"] = liveness_probe(ranks.progress_timeout_seconds)
    container["resources"] = ranks.resources
    container["volumeMounts"] = [tmp_mount(), *spec.volume_mounts]
    container["securityContext"] = container_security_context()

    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        # Workers need no Kubernetes API access; GKE Workload Identity does not need the token.
        "automountServiceAccountToken": False,
        "securityContext": pod_security_context(),
        "volumes": [tmp_volume(), *spec.volumes],
    }
    # Only what the spec sets: an empty selector or toleration list is left out too.
    optional = {
        "serviceAccountName": spec.service_account_name,
        "priorityClassName": spec.priority_class_name,
        "nodeSelector": dict(spec.node_selector) if spec.node_selector else None,
        "tolerations": list(spec.tolerations) if spec.tolerations else None,
        "affinity": spec.affinity,
    }
    return {**pod, **{key: value for key, value in optional.items() if value is not None}}


def intra_op_threads(resources: Mapping[str, Any] | None) -> int | None:
    """The intra-op (OpenMP) threads of a rank with these resources: its CPU limit rounded up,
    at least 1; None without a CPU limit. torch sizes its pool from the node's cores, not the
    container's limit, so a rank limited to 2 CPUs on a 64-core node would run 64 threads that
    contend for 2 CPUs."""
    limit = ((resources or {}).get("limits") or {}).get("cpu")
    if limit is None:
        return None
    try:
        return cpu_threads(limit)
    except ValueError as exc:
        raise RenderError(f"spec.resources.limits.cpu: {exc}") from None


# The keys a credentials Secret holds, and whether the pod may start without one.
S3_SECRET_KEYS = (
    ("AWS_ACCESS_KEY_ID", False),
    ("AWS_SECRET_ACCESS_KEY", False),
    ("AWS_SESSION_TOKEN", True),
)


def s3_credentials_env(secret: str) -> list[dict[str, Any]]:
    """The AWS standard variables from ``secret``: every AWS client of a rank (the CRT's, boto3's,
    s3fs's) reads them first in its chain. Only these keys, never the whole Secret."""
    return [
        {
            "name": key,
            "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": optional}},
        }
        for key, optional in S3_SECRET_KEYS
    ]


def _field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}
