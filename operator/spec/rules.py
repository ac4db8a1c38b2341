"""Cross-field rules of the benchmark's settings, each twice: the CEL the API server runs and its
Python twin (:class:`~ckptbench.operator.spec.rule.Rule`). :data:`RULES` ends with the pods'
rules (:mod:`.pod_rules`): every rule the CRD carries, in its order.

The twin runs in the operator and in ``ckptbench render``, which see objects that never went
through an API server. Each message starts with the field it is about.
"""

from __future__ import annotations

from ckptbench.operator.spec.names import (
    JOBSET_CREATED,
    MAX_TOTAL_BYTES,
)
from ckptbench.operator.spec.pod_rules import POD_RULES
from ckptbench.operator.spec.rule import Rule, Spec
from ckptbench.workload.contract.checkpoint import memory_plan, sizes
from ckptbench.workload.contract.choices import (
    MLPERF_CHECKPOINTS,
    Backend,
    SaveMode,
    Stager,
    Strategy,
)
from ckptbench.workload.contract.settings import (
    NEEDS_CUDA,
    REFERENCE_LAYER_SIZE,
    REFERENCE_PADDING_SIZE,
)


def _under_a_mount(spec: Spec) -> bool:
    path = spec.checkpoint_path
    for mount in spec.volume_mounts:
        mount_path = str(mount.get("mountPath", ""))
        prefix = mount_path if mount_path.endswith("/") else mount_path + "/"
        if path == mount_path or path.startswith(prefix):
            return True
    return False


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
        "!has(self.loadWorldSize) || has(self.model)",
        "loadWorldSize needs model: loadWorldSize ranks reshard the checkpoint worldSize ranks "
        "saved (fewer: the first ones load; more: the run has loadWorldSize pods, the first "
        "worldSize save)",
        lambda s: s.load_world_size is None or s.model is not None,
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
        "self.backend != 'file' || (self.worldSize == 1 && (!has(self.loadWorldSize) || "
        "self.loadWorldSize == 1)) || (has(self.volumeMounts) && "
        "self.volumeMounts.exists(m, self.checkpointPath == m.mountPath || "
        "self.checkpointPath.startsWith(m.mountPath.endsWith('/') ? m.mountPath : "
        "m.mountPath + '/')))",
        "checkpointPath must lie under one of volumeMounts for backend file with more than one "
        "rank (worldSize or loadWorldSize > 1): "
        "every rank reads the metadata rank 0 writes, so they need a shared volume",
        lambda s: (
            s.backend is not Backend.FILE
            or max(s.world_size, s.load_world_size or 0) == 1
            or _under_a_mount(s)
        ),
    ),
    Rule(
        "s3CredentialsSecret",
        "!has(self.s3CredentialsSecret) || self.backend in ['s3', 's3fs']",
        "s3CredentialsSecret is for backends s3 and s3fs",
        lambda s: s.s3_credentials_secret is None or s.backend in (Backend.S3, Backend.S3FS),
    ),
    *POD_RULES,
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
