"""The CheckpointBenchmark resource: its identity and its spec, one pydantic model.

The CRD in ``crds/`` is generated from this model (``ckptbench crd``), so the descriptions here are
what ``kubectl explain`` shows. Rules that span several fields exist twice, on purpose: as CEL
(``x-kubernetes-validations``, enforced by the API server) and as the Python twin in
:meth:`CheckpointBenchmarkSpec._cross_field_rules` (enforced by the operator and ``ckptbench
render``, which see objects that never went through an API server). Both come from :data:`RULES`.

Every bound here is inside
:class:`~ckptbench.workload.contract.config.WorkloadConfig`'s, so a spec that validates
always renders into a configuration the workload accepts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Self, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails

from ckptbench.workload.contract import sizes
from ckptbench.workload.contract.config import MIB, Backend, WorkloadConfig

GROUP = "ckptbench.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "CheckpointBenchmark"
PLURAL = "checkpointbenchmarks"
SINGULAR = "checkpointbenchmark"
SHORT_NAME = "ckb"
CRD_NAME = f"{PLURAL}.{GROUP}"

MAX_WORLD_SIZE = 10_000
# Pods get the hostname `<name>-rank-0-<index>`, a DNS label (<= 63 characters).
REPLICATED_JOB = "rank"
_HOSTNAME_SUFFIX_LENGTH = len(f"-{REPLICATED_JOB}-0-") + len(str(MAX_WORLD_SIZE - 1))
MAX_NAME_LENGTH = 63 - _HOSTNAME_SUFFIX_LENGTH
# The name is also the headless Service's name, which must be a DNS-1035 label.
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

# A bound on the whole checkpoint, so a typo in layerSize cannot ask a cluster for petabytes.
MAX_TOTAL_BYTES = 64 * 1024**4
MAX_LIST_ITEMS = 64

ImagePullPolicy = Literal["Always", "IfNotPresent", "Never"]
IMAGE_PULL_POLICIES: tuple[str, ...] = ("Always", "IfNotPresent", "Never")

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# gs://bucket[/prefix] or an absolute local path; no whitespace (it ends up in env and URLs).
CHECKPOINT_PATH_PATTERN = r"^(gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/\S*)?|/\S*)$"


def validate_name(name: str) -> str | None:
    """Why ``name`` cannot name a benchmark, or None when it can.

    The CRD schema cannot constrain ``metadata.name`` (a CEL rule on the CRD does, for API
    servers that evaluate it); the operator checks again with this before rendering anything.
    """
    if not isinstance(name, str) or not name:
        return "metadata.name: must be a non-empty string"
    if len(name) > MAX_NAME_LENGTH:
        return (
            f"metadata.name: {len(name)} characters is too long; at most {MAX_NAME_LENGTH} so that "
            f"pod hostnames <name>-{REPLICATED_JOB}-0-<index> stay within 63"
        )
    if not re.fullmatch(NAME_PATTERN, name):
        return (
            f"metadata.name: {name!r} must be a DNS-1035 label (lowercase letters, digits and '-', "
            "starting with a letter): it names the JobSet's headless Service"
        )
    return None


@dataclass(frozen=True)
class Rule:
    """One cross-field rule: the CEL the API server runs and the Python twin the operator runs."""

    field: str  # camelCase name of the field the message is about
    cel: str
    message: str
    check: Callable[[CheckpointBenchmarkSpec], bool]

    def to_crd(self) -> dict[str, str]:
        return {"rule": self.cel, "message": self.message, "fieldPath": f".{self.field}"}


def _under_a_mount(spec: CheckpointBenchmarkSpec) -> bool:
    path = spec.checkpoint_path
    for mount in spec.volume_mounts:
        mount_path = str(mount.get("mountPath", ""))
        prefix = mount_path if mount_path.endswith("/") else mount_path + "/"
        if path == mount_path or path.startswith(prefix):
            return True
    return False


def _mounts_name_volumes(spec: CheckpointBenchmarkSpec) -> bool:
    names = {volume.get("name") for volume in spec.volumes}
    return all(mount.get("name") in names for mount in spec.volume_mounts)


def _volume_names_unique(spec: CheckpointBenchmarkSpec) -> bool:
    names = [volume.get("name") for volume in spec.volumes]
    return len(names) == len(set(names))


RULES: tuple[Rule, ...] = (
    Rule(
        "paddingSize",
        "self.paddingSize >= self.worldSize",
        "paddingSize must be at least worldSize: every rank owns at least one tensor",
        lambda s: s.padding_size >= s.world_size,
    ),
    Rule(
        "layerSize",
        f"self.layerSize * self.paddingSize * {sizes.COLUMNS * sizes.FLOAT32_BYTES} "
        f"<= {MAX_TOTAL_BYTES}",
        "layerSize * paddingSize * 4000 bytes (the whole checkpoint) must be at most 64 TiB",
        lambda s: sizes.total_bytes(s.layer_size, s.padding_size) <= MAX_TOTAL_BYTES,
    ),
    Rule(
        "checkpointPath",
        "self.backend != 'file' || self.checkpointPath.startsWith('/')",
        "checkpointPath must be an absolute path for backend file",
        lambda s: s.backend is not Backend.FILE or s.checkpoint_path.startswith("/"),
    ),
    Rule(
        "checkpointPath",
        "self.backend == 'file' || self.checkpointPath.startsWith('gs://')",
        "checkpointPath must be a gs://bucket/prefix URL for backends gcs and gcsfs",
        lambda s: s.backend is Backend.FILE or s.checkpoint_path.startswith("gs://"),
    ),
    Rule(
        "checkpointPath",
        "self.backend != 'file' || self.worldSize == 1 || (has(self.volumeMounts) && "
        "self.volumeMounts.exists(m, self.checkpointPath == m.mountPath || "
        "self.checkpointPath.startsWith(m.mountPath.endsWith('/') ? m.mountPath : "
        "m.mountPath + '/')))",
        "checkpointPath must lie under one of volumeMounts for backend file with worldSize > 1: "
        "every rank reads the metadata rank 0 writes, so they need a shared volume",
        lambda s: s.backend is not Backend.FILE or s.world_size == 1 or _under_a_mount(s),
    ),
    Rule(
        "workloadPriorityClassName",
        "!has(self.workloadPriorityClassName) || has(self.queueName)",
        "workloadPriorityClassName requires queueName: only Kueue reads it",
        lambda s: s.workload_priority_class_name is None or s.queue_name is not None,
    ),
    Rule(
        "volumeMounts",
        "!has(self.volumeMounts) || size(self.volumeMounts) == 0 || (has(self.volumes) && "
        "self.volumeMounts.all(m, self.volumes.exists(v, v.name == m.name)))",
        "volumeMounts entries must each name one of volumes",
        _mounts_name_volumes,
    ),
    Rule(
        "volumes",
        "!has(self.volumes) || self.volumes.all(v, self.volumes.exists_one(w, w.name == v.name))",
        "volumes names must be unique",
        _volume_names_unique,
    ),
)


_CRD_RULES: list[JsonValue] = [cast("JsonValue", rule.to_crd()) for rule in RULES]

# -- CRD schemas of the free-form Kubernetes fields ---------------------------------------------
# Pydantic would describe these as open objects; the CRD needs them structural, with unknown fields
# preserved, and with bounded sizes so the API server can estimate the cost of the CEL rules.


def _crd_schema(schema: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def replace(generated: dict[str, Any]) -> None:
        description = generated.get("description")
        generated.clear()
        generated.update(schema)
        if description:
            generated["description"] = description

    return replace


_FREE_OBJECT: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_RESOURCES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "limits": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "requests": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "claims": {
            "type": "array",
            "maxItems": MAX_LIST_ITEMS,
            "items": _FREE_OBJECT,
        },
    },
}
_VOLUMES_SCHEMA: dict[str, Any] = {
    "type": "array",
    "maxItems": MAX_LIST_ITEMS,
    "items": {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string", "maxLength": 63, "pattern": DNS_LABEL}},
        "x-kubernetes-preserve-unknown-fields": True,
    },
}
_VOLUME_MOUNTS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "maxItems": MAX_LIST_ITEMS,
    "items": {
        "type": "object",
        "required": ["name", "mountPath"],
        "properties": {
            "name": {"type": "string", "maxLength": 63, "pattern": DNS_LABEL},
            "mountPath": {"type": "string", "maxLength": 1024, "pattern": "^/"},
        },
        "x-kubernetes-preserve-unknown-fields": True,
    },
}
_TOLERATIONS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "maxItems": MAX_LIST_ITEMS,
    "items": _FREE_OBJECT,
}
_RESOURCE_KEYS = frozenset({"limits", "requests", "claims"})


class CheckpointBenchmarkSpec(BaseModel):
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

    # -- the benchmark (the reference's knobs) ----------------------------------------------------
    world_size: int = Field(
        4,
        ge=1,
        le=MAX_WORLD_SIZE,
        description="Number of ranks: one pod each (the reference's WORLD_SIZE).",
    )
    layer_size: int = Field(
        100_000,
        ge=1,
        le=10_000_000,
        description="Rows of each (layerSize, 1000) float32 tensor: a tensor is layerSize * 4000 "
        "bytes (the reference's LAYER_SIZE).",
    )
    padding_size: int = Field(
        196,
        ge=1,
        le=1_000_000,
        description="Number of tensors, dealt round-robin to the ranks; at least worldSize. Shards "
        "are even when it is a multiple of worldSize (the reference's PADDING_SIZE).",
    )
    sample_count: int = Field(
        8,
        ge=1,
        le=1000,
        description="Timed samples of save and of load (the reference's SAMPLE_COUNT).",
    )
    warmup_samples: int = Field(
        1, ge=0, le=100, description="Untimed samples run before the timed ones."
    )
    backend: Backend = Field(
        Backend.GCS,
        strict=False,  # strict enums would refuse the plain string a manifest holds
        description="Storage backend: gcs (buffered multipart XML upload, the reference's "
        "optimized writer), gcsfs (DCP's fsspec writer/reader, the reference's USE_FSSPEC) or file "
        "(a local or mounted filesystem).",
    )
    checkpoint_path: str = Field(
        ...,
        min_length=1,
        max_length=1024,
        pattern=CHECKPOINT_PATH_PATTERN,
        description="Where checkpoints and results go: gs://bucket/prefix for gcs and gcsfs, an "
        "absolute path for file (under a shared volumeMount when worldSize > 1). Each run writes "
        "under <checkpointPath>/<name>-<uid>/ (the reference's CKPT_DIR_PATH).",
    )
    project: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9.:_-]*$",
        description="GCP project of the storage clients; default: the one of the credentials.",
    )
    async_save: bool = Field(
        False,
        description="Save with dcp.async_save: time blocked (staging) and time until durable are "
        "reported separately.",
    )
    verify: bool = Field(True, description="Verify the content of every loaded tensor.")
    keep_checkpoints: bool = Field(
        False, description="Keep the checkpoint objects after the run (results are always kept)."
    )
    threads: int = Field(8, ge=1, le=256, description="Transfer threads per rank (backend gcs).")
    part_size_bytes: int = Field(
        32 * MIB,
        ge=1 * MIB,
        le=5 * 1024 * MIB,
        description="Multipart upload and ranged download part size in bytes (backend gcs).",
    )
    rendezvous_timeout_seconds: int = Field(
        600,
        ge=1,
        le=86_400,
        description="How long a rank waits for rank 0's address to resolve and answer.",
    )

    # -- the pods ---------------------------------------------------------------------------------
    image: str | None = Field(
        None,
        min_length=1,
        max_length=1024,
        pattern=r"^\S+$",
        description="Workload container image; default: the operator's --default-image.",
    )
    image_pull_policy: ImagePullPolicy | None = Field(
        None, description="Image pull policy; default: the operator's --default-image-pull-policy."
    )
    resources: dict[str, Any] | None = Field(
        None,
        description="Compute resources of each rank's container (a Kubernetes "
        "ResourceRequirements: requests, limits). A rank holds one shard in memory, plus about "
        "300 MiB for the runtime and transfer buffers: request memory accordingly.",
        json_schema_extra=_crd_schema(_RESOURCES_SCHEMA),
    )
    service_account_name: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Service account of the pods; bind it to a Google service account with "
        "Workload Identity for GCS access (no keys in the spec).",
    )
    queue_name: str | None = Field(
        None,
        min_length=1,
        max_length=63,
        pattern=DNS_SUBDOMAIN,
        description="Kueue LocalQueue: the JobSet is created suspended with the label "
        "kueue.x-k8s.io/queue-name and runs when Kueue admits it.",
    )
    workload_priority_class_name: str | None = Field(
        None,
        min_length=1,
        max_length=63,
        pattern=DNS_SUBDOMAIN,
        description="Kueue WorkloadPriorityClass (label kueue.x-k8s.io/priority-class); requires "
        "queueName.",
    )
    priority_class_name: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="PriorityClass of the pods (scheduling and preemption).",
    )
    node_selector: dict[str, str] | None = Field(
        None,
        max_length=MAX_LIST_ITEMS,
        description="Node labels the pods must match.",
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description="Tolerations of the pods (Kubernetes Toleration objects).",
        json_schema_extra=_crd_schema(_TOLERATIONS_SCHEMA),
    )
    affinity: dict[str, Any] | None = Field(
        None,
        description="Affinity of the pods (a Kubernetes Affinity object).",
        json_schema_extra=_crd_schema(_FREE_OBJECT),
    )
    volumes: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description="Volumes of the pods (Kubernetes Volume objects), e.g. a ReadWriteMany "
        "PersistentVolumeClaim for backend file.",
        json_schema_extra=_crd_schema(_VOLUMES_SCHEMA),
    )
    volume_mounts: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description="Mounts of volumes into the worker container (Kubernetes VolumeMount objects); "
        "each names one of volumes.",
        json_schema_extra=_crd_schema(_VOLUME_MOUNTS_SCHEMA),
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
        return value

    @field_validator("volumes")
    @classmethod
    def _check_volumes(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for index, volume in enumerate(value):
            _check_dns_label(volume.get("name"), f"[{index}].name")
        return value

    @field_validator("volume_mounts")
    @classmethod
    def _check_volume_mounts(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for index, mount in enumerate(value):
            _check_dns_label(mount.get("name"), f"[{index}].name")
            mount_path = mount.get("mountPath")
            if not isinstance(mount_path, str) or not mount_path.startswith("/"):
                raise ValueError(f"[{index}].mountPath: must be an absolute path")
        return value

    @model_validator(mode="after")
    def _cross_field_rules(self) -> Self:
        # Each message starts with the field it is about, for the CEL rule and for this twin alike.
        broken = [rule.message for rule in RULES if not rule.check(self)]
        if broken:
            raise ValueError("; ".join(broken))
        return self

    # -- use --------------------------------------------------------------------------------------

    @property
    def total_bytes(self) -> int:
        return sizes.total_bytes(self.layer_size, self.padding_size)

    def to_workload_config(self, run_id: str, master_addr: str) -> WorkloadConfig:
        """The configuration every rank of this benchmark runs with (rank 0; pods set their own)."""
        return WorkloadConfig(
            world_size=self.world_size,
            layer_size=self.layer_size,
            padding_size=self.padding_size,
            sample_count=self.sample_count,
            warmup_samples=self.warmup_samples,
            backend=self.backend,
            checkpoint_path=self.checkpoint_path,
            run_id=run_id,
            project=self.project,
            async_save=self.async_save,
            verify=self.verify,
            keep_checkpoints=self.keep_checkpoints,
            threads=self.threads,
            part_size_bytes=self.part_size_bytes,
            master_addr=master_addr,
            rendezvous_timeout_seconds=float(self.rendezvous_timeout_seconds),
        )


def canonical_json(spec: CheckpointBenchmarkSpec) -> str:
    """The spec as one canonical JSON text: what is hashed, recorded on the JobSet and compared."""
    return json.dumps(spec.model_dump(mode="json", by_alias=True), sort_keys=True)


class SpecError(ValueError):
    """A CheckpointBenchmark spec is invalid; the message names each bad field (spec.<field>)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def parse_spec(raw: object) -> CheckpointBenchmarkSpec:
    """Validate ``raw`` (the object's ``spec``) or raise :class:`SpecError`; never anything else."""
    if isinstance(raw, Mapping) and not isinstance(raw, dict):
        raw = dict(raw)  # kopf hands the spec over as a read-only mapping view; strict wants dict
    try:
        return CheckpointBenchmarkSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError([_describe(error) for error in exc.errors()]) from None


# What a pattern means, instead of the regular expression itself.
_DNS_HINT = "must be lowercase letters, digits, '-' and '.' (a DNS subdomain)"
_PATTERN_HINTS = {
    "checkpointPath": "must be gs://<bucket>[/<prefix>] (a valid bucket name) or an absolute "
    "path, without whitespace",
    "project": "must be a GCP project id (letters, digits, '.', ':', '_', '-')",
    "image": "must be an image reference without whitespace",
    "serviceAccountName": _DNS_HINT,
    "queueName": _DNS_HINT,
    "workloadPriorityClassName": _DNS_HINT,
    "priorityClassName": _DNS_HINT,
}


def _describe(error: ErrorDetails) -> str:
    path = "spec"
    for part in error["loc"]:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "value_error" and not error["loc"]:
        # Cross-field rules start with the field they are about.
        return f"{path}.{message}"
    if message.startswith("["):
        return f"{path}{message}"
    if error["type"] == "string_pattern_mismatch" and error["loc"]:
        message = _PATTERN_HINTS.get(str(error["loc"][-1]), message)
    value = error.get("input")
    got = ""
    if isinstance(value, str | int | float | bool) or value is None:
        got = f" (got {value!r:.80})"
    return f"{path}: {message}{got}"


def _check_dns_label(name: object, where: str) -> None:
    if not isinstance(name, str) or len(name) > 63 or not re.fullmatch(DNS_LABEL, name):
        raise ValueError(
            f"{where}: must be a DNS label (lowercase, <= 63 characters), got {name!r}"
        )
