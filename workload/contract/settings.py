"""Every setting a user can choose, declared once: one pydantic field of
:class:`BenchmarkSettings` (name, type, bounds, default, description) with its :class:`Setting`
metadata (unit, flag, laptop default, sweep axis, where it acts). Made from it: the rank's config
and its ``CKPTBENCH_*`` variables (``WorkloadConfig`` extends it), the CR field and its bounds
(the spec extends it), the ``ckptbench run`` option (:func:`declared`), the sweep axes, and the
record of settings in every result (:meth:`BenchmarkSettings.record`).

Where the checkpoints go and each storage backend's knobs are declared the same way in
:class:`~ckptbench.workload.contract.storage_settings.StorageSettings`, which
:class:`BenchmarkSettings` extends; the :class:`Setting` metadata is in ``declaration.py``.

Adding a setting: declare it here (or, a storage knob, in ``storage_settings.py``), use it where it
acts, document it. Nothing else names it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator
from pydantic.fields import FieldInfo

from ckptbench.workload.contract.checkpoint import models, sizes
from ckptbench.workload.contract.choices import (
    DEFAULT_SAMPLES,
    MLPERF_CHECKPOINTS,
    GarbageCollection,
    Procedure,
    SaveMode,
    Stager,
    Strategy,
    default_samples,
    default_warmups,
)
from ckptbench.workload.contract.declaration import Setting, choice, no_crd_default
from ckptbench.workload.contract.storage_settings import StorageSettings

MAX_WORLD_SIZE = 10_000  # rank hostnames stay DNS labels (see operator/spec/names.py)
MAX_CHECKPOINTS_SAMPLES = 1000
REFERENCE_LAYER_SIZE = 100_000  # the reference's published table
REFERENCE_PADDING_SIZE = 196
TRAIN_MATRIX_MIN, TRAIN_MATRIX_MAX = 16, 16_384
# The largest side a step-time target may choose (3 matrices, 192 MiB): seconds per step on one
# CPU core already, and what the memory plan counts for a target.
TRAIN_TARGET_MATRIX_MAX = 4096
# Staging options a CPU node cannot honour, and why (refused by name, never dropped).
NEEDS_CUDA = {
    "staging_pinned_memory": "pinned memory (StagingOptions.use_pinned_memory) needs a CUDA "
    "runtime; ckptbench's ranks run torch's CPU build on CPU nodes",
    "staging_non_blocking_copy": "a non-blocking copy (StagingOptions.use_non_blocking_copy) "
    "needs an accelerator, which CPU nodes do not have (DCP's DefaultStager asserts one)",
}


# -- the declarations -----------------------------------------------------------------------------


class BenchmarkSettings(StorageSettings):
    """The settings of one benchmark: the same for every rank, chosen by whoever runs it.

    Where the checkpoints go and the storage backends' knobs are :class:`StorageSettings`."""

    # -- the state: the reference's layout, or a model preset ------------------------------------
    world_size: Annotated[int, Setting(local_default=2, axis=True)] = Field(
        4,
        ge=1,
        le=MAX_WORLD_SIZE,
        description="Number of ranks: one pod (or local process) each (the reference's "
        "WORLD_SIZE).",
    )
    layer_size: Annotated[
        int,
        Setting(layout="reference", unit="rows", local_default=10_000, axis=True, metavar="ROWS"),
    ] = Field(
        REFERENCE_LAYER_SIZE,
        ge=1,
        le=10_000_000,
        description="Rows of each (layerSize, 1000) float32 tensor: a tensor is layerSize * 4000 "
        "bytes (the reference's LAYER_SIZE). Default 100000; not with model.",
        json_schema_extra=no_crd_default,
    )
    padding_size: Annotated[
        int, Setting(layout="reference", unit="tensors", local_default=8, axis=True)
    ] = Field(
        REFERENCE_PADDING_SIZE,
        ge=1,
        le=1_000_000,
        description="Number of tensors, dealt round-robin to the ranks; at least worldSize. Shards "
        "are even when it is a multiple of worldSize (the reference's PADDING_SIZE). Default 196; "
        "not with model.",
        json_schema_extra=no_crd_default,
    )
    model: Annotated[models.Preset | None, Setting(axis=True, metavar="PRESET")] = choice(
        None,
        "A Llama 3 preset instead of the reference layout (torchtitan's shapes and key names): "
        "llama3-debug, llama3-8b, llama3-70b, mlperf-llama3-70b (MLPerf Storage's config, 128 "
        "heads) or llama3-405b. Every rank holds its Shard(0) rows of every parameter (and "
        "AdamW state) as a DTensor, as FSDP2 does. Exclusive with layerSize and paddingSize.",
    )
    layers: Annotated[int | None, Setting(layout="model", axis=True)] = Field(
        None,
        ge=1,
        le=1000,
        description="With model: override the number of layers (scaled-down runs).",
    )
    vocab: Annotated[int | None, Setting(layout="model", axis=True)] = Field(
        None,
        ge=1,
        le=10_000_000,
        description="With model: override the vocabulary size (scaled-down runs).",
    )
    optimizer: Annotated[models.Optimizer, Setting(layout="model", axis=True, metavar="NAME")] = (
        choice(
            models.Optimizer.ADAMW,
            "With model: optimizer state saved beside the weights: adamw (exp_avg, exp_avg_sq, "
            "step and param_groups, torchtitan's flattened names) or none.",
        )
    )
    dtype: Annotated[models.DtypeProfile, Setting(layout="model", axis=True, metavar="PROFILE")] = (
        choice(
            models.DtypeProfile.FP32,
            "With model: dtype profile: fp32 (12 bytes/parameter with AdamW, torchtitan's), mlperf "
            "(fp16 weights + fp32 master and moments, 14 bytes/parameter: MLPerf Storage's totals) "
            "or bf16.",
        )
    )
    load_world_size: Annotated[int | None, Setting(layout="model", axis=True, metavar="M")] = Field(
        None,
        ge=1,
        le=MAX_WORLD_SIZE,
        description="With model: load on loadWorldSize ranks, resharding the checkpoint the "
        "worldSize ranks saved into that many pieces and verifying them: fewer (the first "
        "loadWorldSize ranks load, a restart on fewer nodes) or more (the run starts "
        "loadWorldSize ranks, the first worldSize save, all load: a restart on more nodes). "
        "Default: every rank.",
    )
    strategy: Annotated[Strategy, Setting(axis=True, metavar="NAME")] = choice(
        Strategy.SHARDED,
        "How the state lies across ranks and is checkpointed: sharded (each rank saves its own "
        "shards through DCP, FSDP's way; the default), full (the whole state gathered to rank 0, "
        "the gather timed as planning, then saved as one object through the backend's stream as "
        "torch.save into a writer does, and loaded back by rank 0) or replicated (every rank "
        "holds the whole state, DDP's way; DCP writes each tensor once, from the rank its "
        "planner picks, and every rank loads all of it). full and replicated need the "
        "reference layout.",
    )
    load_shard_offset: Annotated[
        int | None, Setting(layout="reference", axis=True, metavar="K")
    ] = Field(
        None,
        ge=1,
        le=MAX_WORLD_SIZE,
        description="Reference layout: each rank loads (and verifies) the shard rank "
        "(rank + K) mod worldSize saved, not its own: MLPerf Storage's read phase, another host "
        "taking over. K = ranks per node makes every rank read another node's shard. Default: "
        "its own shard.",
    )
    seed: Annotated[int, Setting(axis=True)] = Field(
        0, ge=0, le=2**31 - 1, description="Seed of the synthetic tensor content."
    )
    memory_check: Annotated[bool, Setting(flag="--force")] = Field(
        True,
        description="Refuse, before anything is allocated, a run whose estimated peak per rank "
        "(docs/models.md) exceeds the memory it may use (the container's limit; on a laptop, the "
        "available memory shared by the ranks); false runs anyway.",
    )

    # -- how samples run -------------------------------------------------------------------------
    procedure: Annotated[Procedure, Setting(axis=True, metavar="NAME")] = choice(
        Procedure.CKPTBENCH,
        "How samples run: ckptbench (warm-up, then save and load interleaved, each load into a "
        "fresh template), reference (the reference's order: every save, then every load into "
        "one reused template, no warm-up; rank 0's mean and stdev reported beside ours) or mlperf "
        "(MLPerf Storage's: 10 writes then 10 reads; duration = latest rank end minus earliest "
        "rank start, under MLPerf's metric names).",
    )
    sample_count: Annotated[int | None, Setting(flag="--samples", axis=True)] = Field(
        None,
        ge=1,
        le=MAX_CHECKPOINTS_SAMPLES,
        description=f"Timed samples of save and of load (the reference's SAMPLE_COUNT); default "
        f"{DEFAULT_SAMPLES}, {MLPERF_CHECKPOINTS} with procedure mlperf (which needs exactly "
        f"{MLPERF_CHECKPOINTS}).",
    )
    warmup_samples: Annotated[int | None, Setting(flag="--warmup", axis=True)] = Field(
        None,
        ge=0,
        le=100,
        description="Untimed samples run before the timed ones; default 1 with procedure "
        "ckptbench, 0 otherwise (the reference and mlperf procedures run no warm-up).",
    )
    garbage_collection: Annotated[
        GarbageCollection, Setting(flag="--gc", axis=True, metavar="MODE")
    ] = choice(
        GarbageCollection.MANUAL,
        "Python's garbage collector in each rank: manual (automatic collection off, a full "
        "collection before each timed operation, untimed, as torchtitan runs training; the "
        "default) or automatic (Python's default, as a training loop that never touches the "
        "collector runs). Collection time inside an operation is reported either way.",
    )
    async_save: Annotated[bool, Setting(axis=True)] = Field(
        False,
        description="Save with dcp.async_save: time blocked (including DCP's staging copy, a "
        "second full shard in memory until the upload completes) and time until durable are "
        "reported separately.",
    )
    save_mode: Annotated[SaveMode | None, Setting(axis=True, metavar="MODE")] = choice(
        None,
        "How a save runs: sync (dcp.save: the caller waits until the checkpoint is durable), "
        "thread (dcp.async_save with DCP's thread checkpointer: the upload runs on a thread of "
        "the rank's process) or process (DCP's process checkpointer: the upload runs in a second "
        "process per rank, which holds its own interpreter and torch). Default: thread with "
        "asyncSave, sync otherwise. An async save reports the stall (the caller blocked), the "
        "staging copy when it runs apart from the call, and the background time until durable.",
    )
    stager: Annotated[Stager, Setting(axis=True, metavar="NAME")] = choice(
        Stager.BLOCKING,
        "Async saves: what copies the shard before the upload: blocking (DCP's "
        "BlockingAsyncStager as the storage writer provides it: the copy is inside the call) or "
        "default (DCP's DefaultStager with the staging options stagingSharedMemory and "
        "stagingAsync).",
    )
    staging_shared_memory: Annotated[bool, Setting(axis=True)] = Field(
        False,
        description="Stager default: stage into shared memory (StagingOptions.use_shared_memory), "
        "so the process checkpointer receives the copy without pickling it again.",
    )
    staging_async: Annotated[bool, Setting(axis=True)] = Field(
        False,
        description="Stager default: copy on DCP's staging thread (StagingOptions."
        "use_async_staging): the call returns before the copy is done, and the staging time is "
        "reported apart from the stall.",
    )
    staging_pinned_memory: Annotated[bool, Setting()] = Field(
        False,
        description="Stager default: StagingOptions.use_pinned_memory. Refused: pinned memory "
        "needs a CUDA runtime, and ckptbench's ranks run torch's CPU build on CPU nodes.",
    )
    staging_non_blocking_copy: Annotated[bool, Setting()] = Field(
        False,
        description="Stager default: StagingOptions.use_non_blocking_copy. Refused: a "
        "non-blocking copy needs an accelerator (DCP asserts one), which CPU nodes do not have.",
    )
    train_every: Annotated[int | None, Setting(unit="steps", axis=True, metavar="K")] = Field(
        None,
        ge=1,
        le=10_000,
        description="Run a training step beside the saves: after the timed samples, each rank "
        "runs sampleCount checkpoint intervals of K compute steps, saving (with saveMode) at the "
        "start of each and waiting for the previous save first, as DCP's async tutorial does; "
        "step times without a save and with one in flight, the wait for the previous save and "
        "the overhead per interval are reported. Default: no training step.",
    )
    train_matrix: Annotated[int, Setting(unit="rows", axis=True, metavar="N")] = Field(
        1024,
        ge=TRAIN_MATRIX_MIN,
        le=TRAIN_MATRIX_MAX,
        description="The training step: one (N, N) float32 matrix product per step, on the "
        "rank's own process and threads.",
    )
    train_step_ms: Annotated[int | None, Setting(unit="milliseconds", axis=True, metavar="MS")] = (
        Field(
            None,
            ge=1,
            le=60_000,
            description="The training step: aim for this step time in milliseconds instead of "
            "trainMatrix (the rank finds the matrix side, untimed, before the baseline steps; "
            f"at most {TRAIN_TARGET_MATRIX_MAX}).",
        )
    )
    verify: Annotated[bool, Setting(flag="--no-verify")] = Field(
        True, description="Verify the content of every loaded tensor."
    )
    keep_checkpoints: Annotated[bool, Setting(flag="--keep")] = Field(
        False, description="Keep the checkpoint objects after the run (results are always kept)."
    )

    rendezvous_timeout_seconds: Annotated[
        float,
        Setting(unit="seconds", flag="--rendezvous-timeout", local_default=60.0, metavar="SECONDS"),
    ] = Field(
        600.0,
        ge=1,  # not gt=0: Kubernetes' schema and JSON Schema disagree on exclusiveMinimum
        le=86_400,
        description="How long a rank waits for rank 0's address to resolve and answer.",
    )
    progress_timeout_seconds: Annotated[
        float, Setting(unit="seconds", flag="--progress-timeout", metavar="SECONDS")
    ] = Field(
        300.0,
        ge=1,  # not gt=0: Kubernetes' schema and JSON Schema disagree on exclusiveMinimum
        le=86_400,
        description="A rank that neither beats its heartbeat nor moves a byte of I/O for this "
        "long is frozen: the local runner names it and stops the run (rather than waiting for "
        "the run's timeout). In a cluster the worker container's liveness probe reads the "
        "heartbeat: a rank that stops beating for this long is killed and the benchmark fails.",
    )

    @field_validator("staging_pinned_memory", "staging_non_blocking_copy")
    @classmethod
    def _needs_an_accelerator(cls, value: bool, info: ValidationInfo) -> bool:
        # Refused up front: DCP's DefaultStager would fail in the first save (non-blocking copy
        # asserts an accelerator) or pin nothing useful, and a silently dropped option would
        # make the result say a stager ran that did not.
        if value:
            raise ValueError(NEEDS_CUDA[info.field_name or ""])
        return value

    # -- what follows from them ------------------------------------------------------------------

    @property
    def saving(self) -> SaveMode:
        """save_mode, or what async_save means when it is not set (thread, as before)."""
        if self.save_mode is not None:
            return self.save_mode
        return SaveMode.THREAD if self.async_save else SaveMode.SYNC

    @property
    def samples(self) -> int:
        """sample_count, or the procedure's default."""
        if self.sample_count is not None:
            return self.sample_count
        return default_samples(self.procedure)

    @property
    def warmups(self) -> int:
        """warmup_samples, or the procedure's default."""
        if self.warmup_samples is not None:
            return self.warmup_samples
        return default_warmups(self.procedure)

    @property
    def model_spec(self) -> models.ModelSpec | None:
        """The model preset with its overrides, or None for the reference layout."""
        if self.model is None:
            return None
        return models.ModelSpec(self.model, self.layers, self.vocab, self.optimizer, self.dtype)

    @property
    def rank_count(self) -> int:
        """Processes (pods) the run starts: worldSize, or loadWorldSize when the restore is onto
        more ranks than saved (the first worldSize of them save, all of them load)."""
        return max(self.world_size, self.load_world_size or 0)

    def model_sizes(self) -> models.ModelSizes | None:
        """The model's sizes at this world size, or None for the reference layout."""
        spec = self.model_spec
        return None if spec is None else models.model_sizes(spec, self.world_size)

    @property
    def total_bytes(self) -> int:
        """The checkpoint's tensor bytes, all ranks: what the run's throughput divides."""
        sized = self.model_sizes()
        if sized is not None:
            return sized.total_bytes
        return sizes.total_bytes(self.layer_size, self.padding_size)

    def record(self) -> dict[str, Any]:
        """Every declared setting as JSON values, as it ran: what a result records.

        Procedure defaults are resolved (the samples that ran, not "default"), so a result says
        how to run it again whatever the defaults become.
        """
        out = self.model_dump(mode="json", include=set(_declared_names()))
        out["sample_count"] = self.samples
        out["warmup_samples"] = self.warmups
        out["save_mode"] = self.saving.value
        return {d.name: out[d.name] for d in declared() if d.setting.acts_in(self)}


@dataclass(frozen=True)
class Declared:
    """One declared setting: its field name, pydantic's field, and its :class:`Setting`."""

    name: str
    field: FieldInfo
    setting: Setting

    @property
    def flag(self) -> str:
        return self.setting.flag or "--" + self.name.replace("_", "-")

    @property
    def annotation(self) -> Any:
        return self.field.annotation


def declared() -> Iterator[Declared]:
    """The declared settings: the run's own in declaration order, then the storage backends'.
    Options, recorded settings and sweep axes follow this order (the last axis varies fastest)."""
    fields = BenchmarkSettings.model_fields
    for name in _declared_names():
        info = fields[name]
        setting = next((m for m in info.metadata if isinstance(m, Setting)), None)
        if setting is None:
            raise TypeError(f"{name}: a benchmark setting needs its Setting metadata")
        yield Declared(name, info, setting)


def _declared_names() -> list[str]:
    # pydantic lists a parent's fields first; the run's own settings lead, as they were declared.
    inherited = set(StorageSettings.model_fields)
    names = list(BenchmarkSettings.model_fields)
    return [n for n in names if n not in inherited] + [n for n in names if n in inherited]


def axis_names() -> list[str]:
    """The settings a sweep may vary, in declaration order."""
    return [d.name for d in declared() if d.setting.axis]


# How often a rank beats its heartbeat, from progress_timeout_seconds: shared by the rank that
# beats (rank/process/heartbeat.py) and the two that watch it (the local runner, and the kubelet
# through the pod's liveness probe). Beats per progress timeout: a late beat or two never looks
# like a freeze.
BEATS_PER_TIMEOUT = 5
MIN_HEARTBEAT_SECONDS = 0.2
MAX_HEARTBEAT_SECONDS = 10.0


def heartbeat_period(progress_timeout_seconds: float) -> float:
    """Seconds between a rank's heartbeats for a ``progress_timeout_seconds``."""
    return min(
        MAX_HEARTBEAT_SECONDS,
        max(MIN_HEARTBEAT_SECONDS, progress_timeout_seconds / BEATS_PER_TIMEOUT),
    )
