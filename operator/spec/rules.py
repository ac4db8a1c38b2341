"""Cross-field rules of the spec, each twice: the CEL the API server runs and its Python twin.

The twin runs in the operator and in ``ckptbench render``, which see objects that never went
through an API server. Each message starts with the field it is about.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ckptbench.operator.spec.names import (
    CONTROL_PLANE_KEYS,
    JOBSET_CREATED,
    MAX_TOTAL_BYTES,
    PARENT_STEP,
    SYSTEM_PRIORITY_PREFIX,
    TMP_PATH,
    TMP_VOLUME,
    VOLUME_SOURCES,
)
from ckptbench.workload.contract.checkpoint import memory_plan, models, sizes
from ckptbench.workload.contract.choices import (
    MLPERF_CHECKPOINTS,
    Backend,
    Procedure,
    SaveMode,
    Stager,
    Strategy,
)
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.settings import (
    NEEDS_CUDA,
    REFERENCE_LAYER_SIZE,
    REFERENCE_PADDING_SIZE,
)


class Spec(Protocol):
    """What the rules read of a CheckpointBenchmark spec: its model runs them, so this module
    names the fields rather than importing the model (which would be an import circle)."""

    @property
    def model_fields_set(self) -> set[str]: ...
    @property
    def world_size(self) -> int: ...
    @property
    def layer_size(self) -> int: ...
    @property
    def padding_size(self) -> int: ...
    @property
    def model(self) -> models.Preset | None: ...
    @property
    def layers(self) -> int | None: ...
    @property
    def vocab(self) -> int | None: ...
    @property
    def load_world_size(self) -> int | None: ...
    @property
    def load_shard_offset(self) -> int | None: ...
    @property
    def strategy(self) -> Strategy: ...
    @property
    def async_save(self) -> bool: ...
    @property
    def memory_check(self) -> bool: ...
    @property
    def procedure(self) -> Procedure: ...
    @property
    def sample_count(self) -> int | None: ...
    @property
    def warmup_samples(self) -> int | None: ...
    @property
    def save_mode(self) -> SaveMode | None: ...
    @property
    def stager(self) -> Stager: ...
    @property
    def staging_shared_memory(self) -> bool: ...
    @property
    def staging_async(self) -> bool: ...
    @property
    def staging_pinned_memory(self) -> bool: ...
    @property
    def staging_non_blocking_copy(self) -> bool: ...
    @property
    def backend(self) -> Backend: ...
    @property
    def checkpoint_path(self) -> str: ...
    @property
    def resources(self) -> dict[str, Any] | None: ...
    @property
    def queue_name(self) -> str | None: ...
    @property
    def workload_priority_class_name(self) -> str | None: ...
    @property
    def s3_credentials_secret(self) -> str | None: ...
    @property
    def priority_class_name(self) -> str | None: ...
    @property
    def node_selector(self) -> dict[str, str] | None: ...
    @property
    def tolerations(self) -> list[dict[str, Any]]: ...
    @property
    def volumes(self) -> list[dict[str, Any]]: ...
    @property
    def volume_mounts(self) -> list[dict[str, Any]]: ...
    def to_workload_config(self, run_id: str, master_addr: str) -> WorkloadConfig: ...


@dataclass(frozen=True)
class Rule:
    """One cross-field rule: the CEL the API server runs and the Python twin the operator runs."""

    field: str  # camelCase name of the field the message is about
    cel: str
    message: str
    check: Callable[[Spec], bool]

    def to_crd(self) -> dict[str, str]:
        return {"rule": self.cel, "message": self.message, "fieldPath": f".{self.field}"}


def _under_a_mount(spec: Spec) -> bool:
    path = spec.checkpoint_path
    for mount in spec.volume_mounts:
        mount_path = str(mount.get("mountPath", ""))
        prefix = mount_path if mount_path.endswith("/") else mount_path + "/"
        if path == mount_path or path.startswith(prefix):
            return True
    return False


def _mounts_name_volumes(spec: Spec) -> bool:
    names = {volume.get("name") for volume in spec.volumes}
    return all(mount.get("name") in names for mount in spec.volume_mounts)


def _volume_names_unique(spec: Spec) -> bool:
    names = [volume.get("name") for volume in spec.volumes]
    return len(names) == len(set(names))


def _one_source_each(spec: Spec) -> bool:
    return all(sum(source in v for source in VOLUME_SOURCES) == 1 for v in spec.volumes)


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


_ONE_SOURCE_CEL = " + ".join(f"(has(v.{source}) ? 1 : 0)" for source in VOLUME_SOURCES)

# layerSize and paddingSize have no CRD default (so `has` tells whether a spec set them): CEL
# reads them through these, with the reference's values when absent.
_LAYER = f"(has(self.layerSize) ? self.layerSize : {REFERENCE_LAYER_SIZE})"
_PADDING = f"(has(self.paddingSize) ? self.paddingSize : {REFERENCE_PADDING_SIZE})"


def _model_alone(spec: Spec) -> bool:
    return spec.model is None or not ({"layer_size", "padding_size"} & spec.model_fields_set)


RULES: tuple[Rule, ...] = (
    Rule(
        "model",
        "!has(self.model) || (!has(self.layerSize) && !has(self.paddingSize))",
        "model is exclusive with layerSize and paddingSize (the reference layout's settings)",
        _model_alone,
    ),
    Rule(
        "warmupSamples",
        "!has(self.warmupSamples) || self.warmupSamples == 0 || !has(self.procedure) || "
        "self.procedure == 'ckptbench'",
        "warmupSamples must be 0 with procedure reference or mlperf: they run no warm-up",
        lambda s: not s.warmup_samples or s.procedure.value == "ckptbench",
    ),
    Rule(
        "sampleCount",
        "!has(self.sampleCount) || !has(self.procedure) || self.procedure != 'mlperf' || "
        f"self.sampleCount == {MLPERF_CHECKPOINTS}",
        f"sampleCount must be {MLPERF_CHECKPOINTS} with procedure mlperf: MLPerf Storage runs "
        f"{MLPERF_CHECKPOINTS} writes then {MLPERF_CHECKPOINTS} reads",
        lambda s: (
            s.sample_count is None
            or s.procedure.value != "mlperf"
            or s.sample_count == MLPERF_CHECKPOINTS
        ),
    ),
    Rule(
        "saveMode",
        "!has(self.saveMode) || self.saveMode != 'sync' || !has(self.asyncSave) || !self.asyncSave",
        "saveMode sync contradicts asyncSave (an async save): set one of them",
        lambda s: s.save_mode is not SaveMode.SYNC or not s.async_save,
    ),
    Rule(
        "stager",
        "(!has(self.stagingSharedMemory) || !self.stagingSharedMemory) && "
        "(!has(self.stagingAsync) || !self.stagingAsync) || "
        "(has(self.stager) && self.stager == 'default')",
        "stager must be default with stagingSharedMemory or stagingAsync: they are options of "
        "DCP's DefaultStager",
        lambda s: not (s.staging_shared_memory or s.staging_async) or s.stager is Stager.DEFAULT,
    ),
    Rule(
        "stagingPinnedMemory",
        "!has(self.stagingPinnedMemory) || !self.stagingPinnedMemory",
        "stagingPinnedMemory is refused: " + NEEDS_CUDA["staging_pinned_memory"],
        lambda s: not s.staging_pinned_memory,
    ),
    Rule(
        "stagingNonBlockingCopy",
        "!has(self.stagingNonBlockingCopy) || !self.stagingNonBlockingCopy",
        "stagingNonBlockingCopy is refused: " + NEEDS_CUDA["staging_non_blocking_copy"],
        lambda s: not s.staging_non_blocking_copy,
    ),
    Rule(
        "layers",
        "!has(self.layers) || has(self.model)",
        "layers needs model: it overrides a model preset's number of layers",
        lambda s: s.layers is None or s.model is not None,
    ),
    Rule(
        "vocab",
        "!has(self.vocab) || has(self.model)",
        "vocab needs model: it overrides a model preset's vocabulary size",
        lambda s: s.vocab is None or s.model is not None,
    ),
    Rule(
        "loadWorldSize",
        "!has(self.loadWorldSize) || (has(self.model) && self.loadWorldSize <= self.worldSize)",
        "loadWorldSize needs model and must be at most worldSize: the first loadWorldSize ranks "
        "reshard the checkpoint the others saved with them",
        lambda s: (
            s.load_world_size is None or (s.model is not None and s.load_world_size <= s.world_size)
        ),
    ),
    Rule(
        "strategy",
        "!has(self.strategy) || self.strategy == 'sharded' || "
        "(!has(self.model) && !has(self.loadShardOffset))",
        "strategy full and replicated need the reference layout (no model) and no "
        "loadShardOffset: a model preset is FSDP2's sharded state, and no rank of theirs has a "
        "shard of its own to trade",
        lambda s: (
            s.strategy is Strategy.SHARDED or (s.model is None and s.load_shard_offset is None)
        ),
    ),
    Rule(
        "asyncSave",
        "!has(self.strategy) || self.strategy != 'full' || !has(self.asyncSave) || !self.asyncSave",
        "asyncSave cannot be true with strategy full: torch.save into a stream has no "
        "asynchronous form",
        lambda s: not (s.strategy is Strategy.FULL and s.async_save),
    ),
    Rule(
        "saveMode",
        "!has(self.strategy) || self.strategy != 'full' || !has(self.saveMode) || "
        "self.saveMode == 'sync'",
        "saveMode must be sync with strategy full: torch.save into a stream has no "
        "asynchronous form",
        lambda s: not (s.strategy is Strategy.FULL and s.save_mode not in (None, SaveMode.SYNC)),
    ),
    Rule(
        "loadShardOffset",
        "!has(self.loadShardOffset) || "
        "(!has(self.model) && self.loadShardOffset % self.worldSize != 0)",
        "loadShardOffset needs the reference layout (no model) and must not be a multiple of "
        "worldSize: each rank loads the shard of rank (rank + loadShardOffset) mod worldSize",
        lambda s: (
            s.load_shard_offset is None
            or (s.model is None and s.load_shard_offset % s.world_size != 0)
        ),
    ),
    Rule(
        "paddingSize",
        f"has(self.model) || {_PADDING} >= self.worldSize",
        "paddingSize must be at least worldSize: every rank owns at least one tensor",
        lambda s: s.model is not None or s.padding_size >= s.world_size,
    ),
    Rule(
        "layerSize",
        f"has(self.model) || {_LAYER} * {_PADDING} * {sizes.COLUMNS * sizes.FLOAT32_BYTES} "
        f"<= {MAX_TOTAL_BYTES}",
        "layerSize * paddingSize * 4000 bytes (the whole checkpoint) must be at most 64 TiB",
        lambda s: (
            s.model is not None
            or sizes.total_bytes(s.layer_size, s.padding_size) <= MAX_TOTAL_BYTES
        ),
    ),
    Rule(
        "checkpointPath",
        "self.backend != 'file' || self.checkpointPath.startsWith('/')",
        "checkpointPath must be an absolute path for backend file",
        lambda s: s.backend is not Backend.FILE or s.checkpoint_path.startswith("/"),
    ),
    Rule(
        "checkpointPath",
        "!(self.backend in ['gcs', 'gcsfs']) || self.checkpointPath.startsWith('gs://')",
        "checkpointPath must be a gs://bucket/prefix URL for backends gcs and gcsfs",
        lambda s: (
            s.backend not in (Backend.GCS, Backend.GCSFS) or s.checkpoint_path.startswith("gs://")
        ),
    ),
    Rule(
        "checkpointPath",
        "!(self.backend in ['s3', 's3fs']) || self.checkpointPath.startsWith('s3://')",
        "checkpointPath must be an s3://bucket/prefix URL for backends s3 and s3fs",
        lambda s: (
            s.backend not in (Backend.S3, Backend.S3FS) or s.checkpoint_path.startswith("s3://")
        ),
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
        "s3CredentialsSecret",
        "!has(self.s3CredentialsSecret) || self.backend in ['s3', 's3fs']",
        "s3CredentialsSecret is for backends s3 and s3fs",
        lambda s: s.s3_credentials_secret is None or s.backend in (Backend.S3, Backend.S3FS),
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
    Rule(
        "volumes",
        f"!has(self.volumes) || self.volumes.all(v, {_ONE_SOURCE_CEL} == 1)",
        "volumes must each have exactly one source, of the kinds persistentVolumeClaim, csi, "
        "emptyDir, configMap, secret",
        _one_source_each,
    ),
    Rule(
        "volumes",
        f"!has(self.volumes) || self.volumes.all(v, v.name != '{TMP_VOLUME}')",
        f"volumes must not be named {TMP_VOLUME}: the operator mounts that emptyDir at {TMP_PATH}",
        lambda s: all(v.get("name") != TMP_VOLUME for v in s.volumes),
    ),
    Rule(
        "volumeMounts",
        f"!has(self.volumeMounts) || self.volumeMounts.all(m, m.mountPath != '{TMP_PATH}' && "
        f"m.mountPath != '{TMP_PATH}/')",
        f"volumeMounts must not mount over {TMP_PATH}: the operator's emptyDir for temporary files",
        lambda s: all(
            m.get("mountPath") not in (TMP_PATH, TMP_PATH + "/") for m in s.volume_mounts
        ),
    ),
    Rule(
        "volumeMounts",
        "!has(self.volumeMounts) || self.volumeMounts.all(m, (!has(m.subPath) || "
        f"!m.subPath.matches('{PARENT_STEP}')) && (!has(m.subPathExpr) || "
        f"!m.subPathExpr.matches('{PARENT_STEP}')))",
        "volumeMounts subPath and subPathExpr must be relative paths without '..': a mount may "
        "not reach outside its volume",
        lambda s: all(
            not re.search(PARENT_STEP, str(m.get(key, "")))
            for m in s.volume_mounts
            for key in ("subPath", "subPathExpr")
        ),
    ),
    Rule(
        "tolerations",
        "!has(self.tolerations) || self.tolerations.all(t, has(t.key) && t.key != '')",
        "tolerations must each name a taint key: an empty key with operator Exists tolerates "
        "every taint",
        lambda s: all(t.get("key") for t in s.tolerations),
    ),
    Rule(
        "tolerations",
        f"!has(self.tolerations) || self.tolerations.all(t, !has(t.key) || "
        f"!(t.key in {_cel_list(CONTROL_PLANE_KEYS)}))",
        "tolerations must not tolerate control-plane taints",
        lambda s: all(t.get("key") not in CONTROL_PLANE_KEYS for t in s.tolerations),
    ),
    Rule(
        "nodeSelector",
        "!has(self.nodeSelector) || "
        f"self.nodeSelector.all(k, !(k in {_cel_list(CONTROL_PLANE_KEYS)}))",
        "nodeSelector must not select control-plane nodes",
        lambda s: not set(s.node_selector or {}) & set(CONTROL_PLANE_KEYS),
    ),
    Rule(
        "priorityClassName",
        f"!has(self.priorityClassName) || "
        f"!self.priorityClassName.startsWith('{SYSTEM_PRIORITY_PREFIX}')",
        f"priorityClassName must not be a {SYSTEM_PRIORITY_PREFIX}* class: those keep the "
        "cluster itself running",
        lambda s: not (s.priority_class_name or "").startswith(SYSTEM_PRIORITY_PREFIX),
    ),
)


# A benchmark's spec is fixed once its run started: the operator renders the JobSet from it once
# and refuses a later edit (reconcile._ran_spec compares the spec with the one the JobSet runs,
# and says what changed in the SpecChangeRejected condition). This transition rule refuses the
# edit at admission already. It sits on the whole object, the one place CEL sees the status: the
# run started when the JobSetCreated condition is True (before that, as for the operator, an edit
# may still fix a spec the operator refused). The operator's check stays as its twin: it also
# covers an edit in the moment between the JobSet's creation and the status saying so, an edit
# inside a free-form Kubernetes object (CEL compares only what the schema types: resources'
# quantities, affinity, a volume's source), and objects that never went through an API server.
IMMUTABLE_SPEC: dict[str, str] = {
    "rule": "self.spec == oldSelf.spec || !has(oldSelf.status) || "
    "!has(oldSelf.status.conditions) || !oldSelf.status.conditions.exists(c, "
    f"c.type == '{JOBSET_CREATED}' && c.status == 'True')",
    "message": "spec is immutable once the run started (condition JobSetCreated): the JobSet "
    "runs the spec it was created with; delete and re-create the benchmark to run another",
    "fieldPath": ".spec",
    "reason": "FieldValueForbidden",
}


def memory_problem(spec: Spec) -> str | None:
    """``resources.limits.memory`` below a rank's estimated peak, or None (no limit, forced).

    The estimate is the workload's own (``contract/checkpoint/memory_plan.py``), for the largest
    rank.
    """
    if not spec.memory_check or not spec.resources:
        return None
    quantity = (spec.resources.get("limits") or {}).get("memory")
    if quantity is None:
        return None
    try:
        limit = memory_plan.parse_quantity(str(quantity))
    except ValueError as exc:
        return f"resources.limits.memory: {exc}"
    config = spec.to_workload_config("check", "127.0.0.1")
    text = memory_plan.refusal(
        config.memory_estimate(),
        limit,
        f"resources.limits.memory {quantity}",
        "raise the limit, use more ranks (worldSize)"
        + (" or fewer layers" if spec.model is not None else " or a smaller layerSize"),
        "memoryCheck: false",
    )
    return None if text is None else f"resources.limits.memory: {text}"
