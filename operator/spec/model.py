"""The CheckpointBenchmark spec, one pydantic model.

The CRD in ``crds/`` is generated from this model (``ckptbench crd``), so the descriptions here are
what ``kubectl explain`` shows. Rules that span several fields exist twice, on purpose: as CEL
(``x-kubernetes-validations``, enforced by the API server) and as the Python twin in
:meth:`CheckpointBenchmarkSpec._cross_field_rules` (enforced by the operator and ``ckptbench
render``, which see objects that never went through an API server). Both come from
:data:`~ckptbench.operator.spec.rules.RULES`.

Every bound here is inside
:class:`~ckptbench.workload.contract.config.WorkloadConfig`'s, so a spec that validates
always renders into a configuration the workload accepts.
"""

from __future__ import annotations

import json
from typing import Any, Self, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from ckptbench.operator.spec.model_preset import ModelSettings, enum_field, workload_layout
from ckptbench.operator.spec.names import (
    CHECKPOINT_PATH_PATTERN,
    MAX_LIST_ITEMS,
    MAX_WORLD_SIZE,
    REFERENCE_LAYER_SIZE,
    REFERENCE_PADDING_SIZE,
    ImagePullPolicy,
)
from ckptbench.operator.spec.objects import ITEM_CHECKS, object_list, optional_name
from ckptbench.operator.spec.rules import RULES, memory_problem, no_crd_default
from ckptbench.operator.spec.schemas import (
    FREE_OBJECT,
    RESOURCES_SCHEMA,
    TOLERATIONS_SCHEMA,
    VOLUME_MOUNTS_SCHEMA,
    VOLUMES_SCHEMA,
    crd_schema,
)
from ckptbench.workload.contract import models, sizes
from ckptbench.workload.contract.config import (
    MIB,
    MLPERF_CHECKPOINTS,
    Backend,
    GarbageCollection,
    Procedure,
    UploadScheme,
    WorkloadConfig,
)
from ckptbench.workload.contract.quantity import cpu_threads

_CRD_RULES: list[JsonValue] = [cast("JsonValue", rule.to_crd()) for rule in RULES]
_RESOURCE_KEYS = frozenset({"limits", "requests", "claims"})


DEFAULT_SAMPLES = 8  # the reference's SAMPLE_COUNT
# Settings the workload configuration holds under the same name, type and meaning.
_SAME_IN_CONFIG = (  # noqa: SIM905 (fourteen names read better as words than as a column)
    "world_size memory_check procedure drop_cache backend checkpoint_path project async_save "
    "verify keep_checkpoints threads part_size_bytes garbage_collection upload_scheme"
).split()


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
    # No default in the CRD (the API server would fill it in and CEL could no longer tell a spec
    # that sets it from one that does not): the reference's values apply when neither is given.
    layer_size: int = Field(
        REFERENCE_LAYER_SIZE,
        ge=1,
        le=10_000_000,
        description="Rows of each (layerSize, 1000) float32 tensor: a tensor is layerSize * 4000 "
        "bytes (the reference's LAYER_SIZE). Default 100000; not with model.",
        json_schema_extra=no_crd_default,
    )
    padding_size: int = Field(
        REFERENCE_PADDING_SIZE,
        ge=1,
        le=1_000_000,
        description="Number of tensors, dealt round-robin to the ranks; at least worldSize. Shards "
        "are even when it is a multiple of worldSize (the reference's PADDING_SIZE). Default 196; "
        "not with model.",
        json_schema_extra=no_crd_default,
    )
    model: ModelSettings | None = Field(
        None,
        description="A Llama 3 preset instead of the reference layout: every rank holds its "
        "Shard(0) rows of every parameter (and AdamW state) as a DTensor, as FSDP2 does. "
        "Exclusive with layerSize and paddingSize.",
    )
    load_world_size: int | None = Field(
        None,
        ge=1,
        le=MAX_WORLD_SIZE,
        description="With model: load on the first loadWorldSize ranks only (at most worldSize), "
        "resharding the checkpoint into that many pieces and verifying them. Default: every rank.",
    )
    memory_check: bool = Field(
        True,
        description="Refuse a spec whose resources.limits.memory is below a rank's estimated "
        "peak (docs/models.md), and have each rank check its container's limit; false: run anyway.",
    )
    sample_count: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="Timed samples of save and of load (the reference's SAMPLE_COUNT); default 8, "
        "10 with procedure mlperf (which needs exactly 10).",
    )
    warmup_samples: int | None = Field(
        None,
        ge=0,
        le=100,
        description="Untimed samples run before the timed ones; default 1 with procedure "
        "ckptbench, 0 otherwise (the reference and mlperf procedures run no warm-up).",
    )
    procedure: Procedure = enum_field(
        Procedure.CKPTBENCH,
        "How samples run: ckptbench (warm-up, then save and load interleaved, each "
        "load into a fresh template), reference (the reference's order: every save, then every "
        "load into one reused template, no warm-up; rank 0's mean and stdev reported beside ours) "
        "or mlperf (MLPerf Storage's: 10 writes then 10 reads; duration = latest rank end minus "
        "earliest rank start, under MLPerf's metric names).",
    )
    garbage_collection: GarbageCollection = enum_field(
        GarbageCollection.MANUAL,
        "Python's garbage collector in each rank: manual (automatic collection off, a full "
        "collection before each timed operation, untimed, as torchtitan runs training; the "
        "default) or automatic (Python's default, as a training loop that never touches the "
        "collector runs). Collection time inside an operation is reported either way.",
    )
    drop_cache: bool = Field(
        True,
        description="Backend file: evict the written files from the node's page cache before "
        "each load, so loads read the storage (a network file system may still cache on its "
        "server). False keeps the cache.",
    )
    backend: Backend = enum_field(
        Backend.GCS,
        "Storage backend: gcs (ckptbench's own writer and reader: each rank's file is "
        "cut into partSizeBytes parts uploaded by `threads` workers (see uploadScheme); loads "
        "are parallel ranged reads "
        "straight into the tensors), gcsfs (DCP's fsspec writer/reader over gcsfs, the "
        "reference's USE_FSSPEC) or file (a local or mounted filesystem).",
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
    project: str | None = optional_name(
        100,
        "GCP project of the storage clients; default: the one of the credentials.",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9.:_-]*$",
    )
    async_save: bool = Field(
        False,
        description="Save with dcp.async_save: time blocked (including DCP's staging copy, a "
        "second full shard in memory until the upload completes) and time until durable are "
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
        description="Upload part and ranged download size in bytes (backend gcs); the "
        "multipart upload scheme raises it to GCS's 5 MiB minimum part.",
    )
    upload_scheme: UploadScheme = enum_field(
        UploadScheme.AUTO,
        "Backend gcs: how a rank's parts become its object: multipart (GCS's XML multipart "
        "upload: no compose, no part deletes, what Google recommends for parallel uploads), "
        "compose (a parallel composite upload: parts as temporary objects, composed, then "
        "deleted) or auto (multipart on GCS; compose against an emulator, since none "
        "implements the XML multipart upload).",
    )
    rendezvous_timeout_seconds: int = Field(
        600,
        ge=1,
        le=86_400,
        description="How long a rank waits for rank 0's address to resolve and answer.",
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
        description="Affinity of the pods (a Kubernetes Affinity object).",
        json_schema_extra=crd_schema(FREE_OBJECT),
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

    # -- use --------------------------------------------------------------------------------------

    @property
    def samples(self) -> int:
        """sampleCount, or the procedure's default (MLPerf Storage's 10 for mlperf)."""
        if self.sample_count is not None:
            return self.sample_count
        return MLPERF_CHECKPOINTS if self.procedure is Procedure.MLPERF else DEFAULT_SAMPLES

    @property
    def warmups(self) -> int:
        """warmupSamples, or the procedure's default (only ckptbench runs a warm-up)."""
        if self.warmup_samples is not None:
            return self.warmup_samples
        return 1 if self.procedure is Procedure.CKPTBENCH else 0

    @property
    def total_bytes(self) -> int:
        if self.model is not None:
            return models.model_sizes(self.model.to_contract(), self.world_size).total_bytes
        return sizes.total_bytes(self.layer_size, self.padding_size)

    def to_workload_config(self, run_id: str, master_addr: str) -> WorkloadConfig:
        """The configuration every rank of this benchmark runs with (rank 0; pods set their own)."""
        layout = workload_layout(self.model, self.layer_size, self.padding_size)
        if self.model is not None:
            layout["load_world_size"] = self.load_world_size
        return WorkloadConfig(
            **{name: getattr(self, name) for name in _SAME_IN_CONFIG},
            **layout,
            sample_count=self.samples,
            warmup_samples=self.warmups,
            run_id=run_id,
            master_addr=master_addr,
            rendezvous_timeout_seconds=float(self.rendezvous_timeout_seconds),
        )


def canonical_json(spec: CheckpointBenchmarkSpec) -> str:
    """The spec as one canonical JSON text: what is hashed, recorded on the JobSet and compared."""
    return json.dumps(spec.model_dump(mode="json", by_alias=True), sort_keys=True)
