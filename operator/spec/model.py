"""The CheckpointBenchmark spec, one pydantic model.

Its benchmark settings are the workload's own declarations
(:class:`~ckptbench.workload.contract.settings.BenchmarkSettings`, which it extends): the CRD
field, its bounds and its description come from the one place the rank's variable and the
``ckptbench run`` option come from too. This model adds what only a cluster has: the pods
(image, resources, volumes, scheduling) and the run (restarts, deadline).

The CRD in ``crds/`` is generated from this model (``ckptbench crd``), so the descriptions here are
what ``kubectl explain`` shows. Each rule that spans several fields is enforced twice, from one
declaration: as CEL (``x-kubernetes-validations``, enforced by the API server) and as its Python
twin in :meth:`CheckpointBenchmarkSpec._cross_field_rules` (enforced by the operator and
``ckptbench render``, which see objects that never went through an API server). :data:`RULES`
holds them: the settings' (declared beside the settings, which the rank's config runs too), then
the CR's own (:data:`~ckptbench.operator.spec.rules.RULES_OF_THE_CR`).
"""

from __future__ import annotations

import json
from typing import Any, Self, cast

from pydantic import (
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from ckptbench.operator.spec.names import MAX_LIST_ITEMS, ImagePullPolicy
from ckptbench.operator.spec.objects import ITEM_CHECKS, object_list, optional_name
from ckptbench.operator.spec.policy import CONTEXT_KEY, Policy
from ckptbench.operator.spec.rules import RULES_OF_THE_CR, memory_problem
from ckptbench.operator.spec.schemas import (
    AFFINITY_SCHEMA,
    RESOURCES_SCHEMA,
    TOLERATIONS_SCHEMA,
    VOLUME_MOUNTS_SCHEMA,
    VOLUMES_SCHEMA,
    crd_schema,
)
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.quantity import cpu_threads
from ckptbench.workload.contract.rule import Rule
from ckptbench.workload.contract.settings import SETTINGS_RULES, BenchmarkSettings

# Every rule the CRD carries, in its order, each with its Python twin.
RULES: tuple[Rule[CheckpointBenchmarkSpec], ...] = (*SETTINGS_RULES, *RULES_OF_THE_CR)
_CRD_RULES: list[JsonValue] = [cast("JsonValue", rule.to_crd()) for rule in RULES]
# No claims: a pod's resources.claims name its spec.resourceClaims (dynamic resource
# allocation), which the operator never renders, so a claim passed through made a pod the API
# server refuses, or reached devices the benchmark has no business with.
_RESOURCE_KEYS = frozenset({"limits", "requests"})


class CheckpointBenchmarkSpec(BenchmarkSettings):
    """A distributed PyTorch checkpoint (torch.distributed.checkpoint) save/load benchmark:
    worldSize pods each save and load their shard of a synthetic state_dict of paddingSize float32
    tensors of shape (layerSize, 1000), timed over sampleCount samples."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        # No coercion ("4" for 4, "yes" for true): accept exactly what the CRD schema accepts.
        strict=True,
        frozen=True,
        json_schema_extra={"x-kubernetes-validations": _CRD_RULES},
    )

    # -- the pods ---------------------------------------------------------------------------------
    image: str | None = optional_name(
        1024,
        "Workload container image; default: the operator's --default-image.",
        pattern=r"^\S+$",
    )
    image_pull_policy: ImagePullPolicy | None = Field(
        None, description="Image pull policy; default: the operator's --default-image-pull-policy."
    )
    resources: dict[str, Any] | None = Field(
        None,
        description="Compute resources of each rank's container (a Kubernetes "
        "ResourceRequirements: requests, limits). A rank holds one shard in memory (two with "
        "asyncSave, while DCP's staging copy is uploaded), plus about 300 MiB for the runtime and "
        "transfer buffers: request memory accordingly.",
        json_schema_extra=crd_schema(RESOURCES_SCHEMA),
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

    @model_validator(mode="after")
    def _cross_field_rules(self) -> Self:
        # Each message starts with the field it is about, for the CEL rule and for this twin alike.
        broken = [rule.message for rule in RULES if not rule.check(self)]
        if not broken:
            # Python only: the estimate needs the model's arithmetic, which CEL cannot do.
            memory = memory_problem(self)
            if memory is not None:
                broken.append(memory)
        if broken:
            raise ValueError("; ".join(broken))
        return self

    @model_validator(mode="after")
    def _admin_policy(self, info: ValidationInfo) -> Self:
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

    # -- use --------------------------------------------------------------------------------------

    def to_workload_config(self, run_id: str, master_addr: str) -> WorkloadConfig:
        """The configuration every rank of this benchmark runs with (rank 0; pods set their own).

        Only the settings the spec sets are passed: the rest take the same declared defaults, and
        an unset layerSize must stay unset beside a model (they are exclusive).
        """
        settings = self.model_dump(include=_SETTINGS, exclude_unset=True)
        return WorkloadConfig(**settings, run_id=run_id, master_addr=master_addr)


_SETTINGS = set(BenchmarkSettings.model_fields)


def canonical_json(spec: CheckpointBenchmarkSpec) -> str:
    """The spec as one canonical JSON text: what is hashed, recorded on the JobSet and compared."""
    return json.dumps(spec.model_dump(mode="json", by_alias=True), sort_keys=True)
