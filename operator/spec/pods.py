"""What every benchmark kind's spec says about its pods and its run, declared once.

A CheckpointBenchmark and a DataLoadingBenchmark both run as a JobSet of ranks: the image, the
resources, the volumes, the scheduling, the credentials, the queue, the restarts and the deadline
are the same fields with the same checks and the same admin's allow-lists. :class:`PodSpec` holds
them; each kind's spec extends this and its settings' declaration, written ``(PodSpec, Settings)``
(pydantic lays out the last base's fields first, so the settings come first in the CRD), and
redeclares only what it says differently (``resources``: what a rank holds in memory is the kind's
own; a redeclared field keeps its place).
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from ckptbench.operator.spec.names import MAX_LIST_ITEMS, ImagePullPolicy
from ckptbench.operator.spec.objects import ITEM_CHECKS, object_list, optional_name
from ckptbench.operator.spec.policy import CONTEXT_KEY, Policy
from ckptbench.operator.spec.schemas import (
    AFFINITY_SCHEMA,
    RESOURCES_SCHEMA,
    TOLERATIONS_SCHEMA,
    VOLUME_MOUNTS_SCHEMA,
    VOLUMES_SCHEMA,
    crd_schema,
)
from ckptbench.workload.contract.quantity import cpu_threads

# No claims: a pod's resources.claims name its spec.resourceClaims (dynamic resource
# allocation), which the operator never renders, so a claim passed through made a pod the API
# server refuses, or reached devices the benchmark has no business with.
_RESOURCE_KEYS = frozenset({"limits", "requests"})


def resources_field(description: str) -> Any:
    """The ``resources`` field, described by each kind for what its ranks hold."""
    return Field(None, description=description, json_schema_extra=crd_schema(RESOURCES_SCHEMA))


class PodSpec(BaseModel):
    """The pods of a benchmark and its run: what only a cluster has."""

    # -- the pods ---------------------------------------------------------------------------------
    image: str | None = optional_name(
        1024,
        "Workload container image; default: the operator's --default-image.",
        pattern=r"^\S+$",
    )
    image_pull_policy: ImagePullPolicy | None = Field(
        None, description="Image pull policy; default: the operator's --default-image-pull-policy."
    )
    resources: dict[str, Any] | None = resources_field(
        "Compute resources of each rank's container (a Kubernetes ResourceRequirements: requests, "
        "limits)."
    )
    service_account_name: str | None = optional_name(
        253,
        "Service account of the pods; bind it to a Google service account with "
        "Workload Identity for GCS access (no keys in the spec).",
    )
    s3_credentials_secret: str | None = optional_name(
        253,
        "Backends s3 and s3fs: a Secret in the benchmark's namespace holding "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and, optionally, AWS_SESSION_TOKEN), "
        "passed to the ranks as those variables (a MinIO or Ceph key). Without it the ranks "
        "take the AWS standard chain: IRSA or EKS Pod Identity through serviceAccountName.",
    )
    queue_name: str | None = optional_name(
        63,
        "Kueue LocalQueue: the JobSet is created suspended with the label "
        "kueue.x-k8s.io/queue-name and runs when Kueue admits it.",
    )
    workload_priority_class_name: str | None = optional_name(
        63,
        "Kueue WorkloadPriorityClass (label kueue.x-k8s.io/priority-class); requires queueName.",
    )
    priority_class_name: str | None = optional_name(
        253,
        "PriorityClass of the pods (scheduling and preemption). system-* classes are "
        "refused, and the operator admits only the classes its chart value "
        "workload.allowedPriorityClassNames lists (none by default).",
    )
    node_selector: dict[str, str] | None = Field(
        None,
        max_length=MAX_LIST_ITEMS,
        description="Node labels the pods must match; control-plane node-role labels are refused.",
    )
    tolerations: list[dict[str, Any]] = object_list(
        TOLERATIONS_SCHEMA,
        "Tolerations of the pods (Kubernetes Toleration objects). Each names a taint "
        "key (no wildcard), never a control-plane one, and the operator admits only the keys its "
        "chart value workload.allowedTolerationKeys lists (none by default).",
    )
    affinity: dict[str, Any] | None = Field(
        None,
        description="Affinity of the pods (a Kubernetes Affinity object); node affinity may "
        "not require or prefer control-plane nodes.",
        json_schema_extra=crd_schema(AFFINITY_SCHEMA),
    )
    volumes: list[dict[str, Any]] = object_list(
        VOLUMES_SCHEMA,
        "Volumes of the pods (Kubernetes Volume objects), e.g. a ReadWriteMany "
        "PersistentVolumeClaim for backend file. Only persistentVolumeClaim, csi, emptyDir, "
        "configMap and secret volumes, one source each; the name ckptbench-tmp is the operator's.",
    )
    volume_mounts: list[dict[str, Any]] = object_list(
        VOLUME_MOUNTS_SCHEMA,
        "Mounts of volumes into the worker container (Kubernetes VolumeMount objects: "
        "name, mountPath, readOnly, subPath, subPathExpr); each names one of volumes. /tmp is the "
        "operator's (an emptyDir: the root filesystem is read-only).",
    )

    # -- the run ----------------------------------------------------------------------------------
    max_restarts: int = Field(
        0,
        ge=0,
        le=10,
        description="How often the whole JobSet is restarted after a failed rank (JobSet "
        "failurePolicy.maxRestarts). Default 0: a failure fails the benchmark.",
    )
    active_deadline_seconds: int | None = Field(
        None,
        ge=1,
        le=7 * 86_400,
        description="Deadline of one attempt in seconds (the Job's activeDeadlineSeconds); "
        "default: none.",
    )

    # -- checks -----------------------------------------------------------------------------------

    @field_validator("resources")
    @classmethod
    def _check_resources(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        unknown = set(value) - _RESOURCE_KEYS
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}; allowed: {sorted(_RESOURCE_KEYS)}")
        for key in ("limits", "requests"):
            amounts = value.get(key)
            if amounts is None:
                continue
            if not isinstance(amounts, dict):
                raise ValueError(f"{key} must be a map of resource name to quantity")
            for resource, quantity in amounts.items():
                if isinstance(quantity, bool) or not isinstance(quantity, str | int | float):
                    raise ValueError(f"{key}.{resource}: quantity must be a string or a number")
                if resource == "cpu":  # the rank's thread count is rendered from it
                    try:
                        cpu_threads(quantity)
                    except ValueError as exc:
                        raise ValueError(f"{key}.cpu: {exc}") from None
        return value

    @field_validator("volumes", "volume_mounts", "tolerations")
    @classmethod
    def _check_objects(
        cls, value: list[dict[str, Any]], info: ValidationInfo
    ) -> list[dict[str, Any]]:
        check = ITEM_CHECKS[str(info.field_name)]
        for index, item in enumerate(value):
            check(item, f"[{index}]")
        return value

    def cross_field_problems(self) -> list[str]:
        """Why the kind's rules that span fields refuse this spec (each message starts with its
        field); the kind's spec says which rules, from its declarations."""
        return []

    @model_validator(mode="after")
    def _rules_then_policy(self, info: ValidationInfo) -> Self:
        broken = self.cross_field_problems()
        if broken:
            raise ValueError("; ".join(broken))
        # The admin's allow-lists, when the validation is given them (parse_spec's policy): the
        # operator and `ckptbench render` pass theirs; a spec read with no deployment in view
        # (a recorded one, a sweep cell) is checked for its shape only.
        context = info.context if isinstance(info.context, dict) else {}
        policy = context.get(CONTEXT_KEY)
        if isinstance(policy, Policy):
            problems = policy.problems(self)
            if problems:
                # parse_spec puts "spec." before the message: each problem keeps its own.
                raise ValueError("; ".join(problems).removeprefix("spec."))
        return self
