"""Every setting a user can choose, declared once: one pydantic field of
:class:`BenchmarkSettings` (name, type, bounds, default, description) with its :class:`Setting`
metadata (unit, flag, laptop default, sweep axis, where it acts). Made from it: the rank's config
and its ``CKPTBENCH_*`` variables (``WorkloadConfig`` extends it), the CR field and its bounds
(the spec extends it), the ``ckptbench run`` option (:func:`declared`), the sweep axes, and the
record of settings in every result (:meth:`BenchmarkSettings.record`).

The settings are declared in three rooms, by meaning, one class extending the next: where the
checkpoints go and each storage backend's knobs
(:class:`~ckptbench.workload.contract.storage_settings.StorageSettings`), the state the ranks
hold (:class:`~ckptbench.workload.contract.state_settings.StateSettings`), and, here, how samples
run. The :class:`Setting` metadata is in ``declaration.py``.

A rule that spans settings is declared once too, right after the class whose fields it reads
(``STORAGE_RULES``, ``STATE_RULES``, and here ``_RUN_RULES``; all of them are
:data:`SETTINGS_RULES`): a :class:`~ckptbench.workload.contract.rule.Rule` holds its CEL, one
message and one Python check over the settings. The rank's config runs every one
(``WorkloadConfig``, naming the field in snake_case), and the CRD carries every one as CEL with
the spec model running the same check (naming it in camelCase).

Adding a setting: declare it, with any rule it needs, in the room it belongs to (this module,
``state_settings.py`` or ``storage_settings.py``); an enum of named choices goes in
``choices.py``; use it where it acts; document it. Nothing else names it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, ClassVar

from pydantic import Field
from pydantic.alias_generators import to_camel

from ckptbench.workload.contract.choices import (
    DEFAULT_SAMPLES,
    MLPERF_CHECKPOINTS,
    Backend,
    GarbageCollection,
    Procedure,
    SaveMode,
    Stager,
    default_samples,
    default_warmups,
)
from ckptbench.workload.contract.data.settings import DATA_RULES, LoaderSettings
from ckptbench.workload.contract.declaration import Declared, Setting, choice, declared_fields

__all__ = ["SETTINGS_RULES", "BenchmarkSettings", "Declared", "declared"]
from ckptbench.workload.contract.rule import Rule
from ckptbench.workload.contract.state_settings import STATE_RULES, StateSettings
from ckptbench.workload.contract.storage_settings import STORAGE_RULES, StorageSettings

MAX_CHECKPOINTS_SAMPLES = 1000
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


class BenchmarkSettings(StateSettings):
    """The settings of one benchmark: the same for every rank, chosen by whoever runs it.

    Where the checkpoints go and the storage backends' knobs are :class:`StorageSettings`."""

    # The group its settings are listed in by `ckptbench run --help` (and `sizes`).
    OPTIONS_GROUP: ClassVar[str] = "run"

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
    async_save: Annotated[bool, Setting(axis=True, recorded_in="save_mode")] = Field(
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
    data_loading: Annotated[LoaderSettings | None, Setting(options_prefix="--data-")] = Field(
        None,
        description="Both demands of training at once: each training step (trainEvery) takes its "
        "batch from a data loader reading a dataset under checkpointPath (made once, reused as "
        "ckptbench data makes it) and spends the loader's compute time per batch, while "
        "checkpoints save. Its settings are ckptbench data's (the reader in backend, preset, "
        "batchSize, numWorkers, ...). Windows of trainEvery steps alternate: a save with the "
        "loader off, a save with the loader reading, the loader reading with no save; each side's "
        "slowdown against running alone is reported. Default: no loader.",
    )
    verify: Annotated[
        bool,
        Setting(
            flag="--no-verify",
            switch="Skip verifying the loaded tensors (by default each is checked bit for bit)",
        ),
    ] = Field(True, description="Verify the content of every loaded tensor.")
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

    def record(self) -> dict[str, Any]:
        """Every declared setting as JSON values, as it ran: what a result records.

        Procedure defaults are resolved (the samples that ran, not "default"), so a result says
        how to run it again whatever the defaults become. The save mode is recorded resolved and
        asyncSave, which it resolves, not at all: a record never says ``async_save=False`` beside
        ``save_mode=thread``.
        """
        out = self.model_dump(mode="json", include=set(_declared_names()))
        out["sample_count"] = self.samples
        out["warmup_samples"] = self.warmups
        out["save_mode"] = self.saving.value
        return {
            d.name: out[d.name]
            for d in declared()
            if d.setting.acts_in(self) and d.setting.recorded_in is None
        }


# The rules that span the settings of how samples run (rule.py says how a rule is read).
# CEL of StateSettings.single_object: strategy full, or format torch-save.
SINGLE_OBJECT_CEL = (
    "((has(self.strategy) && self.strategy == 'full') || "
    "(has(self.format) && self.format == 'torch-save'))"
)

_RUN_RULES: tuple[Rule[BenchmarkSettings], ...] = (
    Rule(
        "warmup_samples",
        "!has(self.warmupSamples) || self.warmupSamples == 0 || !has(self.procedure) || "
        "self.procedure == 'ckptbench'",
        "must be 0 with {procedure} reference or mlperf: they run no warm-up",
        lambda s: not s.warmup_samples or s.procedure is Procedure.CKPTBENCH,
    ),
    Rule(
        "sample_count",
        "!has(self.sampleCount) || !has(self.procedure) || self.procedure != 'mlperf' || "
        f"self.sampleCount == {MLPERF_CHECKPOINTS}",
        f"must be {MLPERF_CHECKPOINTS} with {{procedure}} mlperf: MLPerf Storage runs "
        f"{MLPERF_CHECKPOINTS} writes then {MLPERF_CHECKPOINTS} reads",
        lambda s: (
            s.sample_count is None
            or s.procedure is not Procedure.MLPERF
            or s.sample_count == MLPERF_CHECKPOINTS
        ),
    ),
    Rule(
        "save_mode",
        "!has(self.saveMode) || self.saveMode != 'sync' || !has(self.asyncSave) || !self.asyncSave",
        "sync contradicts {async_save} (an async save): set one of them",
        lambda s: s.save_mode is not SaveMode.SYNC or not s.async_save,
    ),
    Rule(
        "stager",
        "(!has(self.stagingSharedMemory) || !self.stagingSharedMemory) && "
        "(!has(self.stagingAsync) || !self.stagingAsync) || "
        "(has(self.stager) && self.stager == 'default')",
        "must be default with {staging_shared_memory} or {staging_async}: they are options of "
        "DCP's DefaultStager",
        lambda s: not (s.staging_shared_memory or s.staging_async) or s.stager is Stager.DEFAULT,
    ),
    Rule(
        "stager",
        "!has(self.stager) || self.stager != 'default' || (has(self.saveMode) ? "
        "self.saveMode != 'sync' : (has(self.asyncSave) && self.asyncSave))",
        "cannot be default with a sync save ({save_mode} sync, or neither {save_mode} nor "
        "{async_save} set): dcp.save stages nothing, so the stager would be ignored",
        lambda s: s.stager is not Stager.DEFAULT or s.saving is not SaveMode.SYNC,
    ),
    # Refused up front: DCP's DefaultStager would fail in the first save (non-blocking copy
    # asserts an accelerator) or pin nothing useful, and a silently dropped option would make the
    # result say a stager ran that did not.
    Rule(
        "staging_pinned_memory",
        "!has(self.stagingPinnedMemory) || !self.stagingPinnedMemory",
        "is refused: " + NEEDS_CUDA["staging_pinned_memory"],
        lambda s: not s.staging_pinned_memory,
    ),
    Rule(
        "staging_non_blocking_copy",
        "!has(self.stagingNonBlockingCopy) || !self.stagingNonBlockingCopy",
        "is refused: " + NEEDS_CUDA["staging_non_blocking_copy"],
        lambda s: not s.staging_non_blocking_copy,
    ),
    Rule(
        "async_save",
        f"!{SINGLE_OBJECT_CEL} || !has(self.asyncSave) || !self.asyncSave",
        "cannot be true with {strategy} full or {format} torch-save: torch.save into a stream "
        "has no asynchronous form",
        lambda s: not (s.single_object and s.async_save),
    ),
    Rule(
        "save_mode",
        f"!{SINGLE_OBJECT_CEL} || !has(self.saveMode) || self.saveMode == 'sync'",
        "must be sync with {strategy} full or {format} torch-save: torch.save into a stream has "
        "no asynchronous form",
        lambda s: not (s.single_object and s.save_mode not in (None, SaveMode.SYNC)),
    ),
    Rule(
        "save_mode",
        "!has(self.saveMode) || self.saveMode != 'process' || self.backend != 'dataflux'",
        "process cannot run {backend} dataflux: DCP hands its checkpointer process the writer "
        "pickled, and the connector's writer holds a google-cloud-storage client, which refuses "
        "to be pickled",
        lambda s: s.save_mode is not SaveMode.PROCESS or s.backend is not Backend.DATAFLUX,
    ),
    Rule(
        "train_every",
        "!has(self.trainEvery) || !has(self.loadWorldSize) || self.loadWorldSize <= self.worldSize",
        "cannot be set with {load_world_size} above {world_size}: the ranks past {world_size} "
        "join only the load, with no state to train beside the saves",
        lambda s: s.train_every is None or s.rank_count <= s.world_size,
    ),
)


def _reader_scheme_cel(value: str) -> str:
    """CEL for where a reader or checkpoint backend named ``value`` (CEL) reads: gs, s3 or file."""
    return f"({value} == 'file' ? 'file' : ({value} in ['s3', 's3fs'] ? 's3' : 'gs'))"


_LOADER_READER = "(has(self.dataLoading.backend) ? self.dataLoading.backend : 'gcs')"
_CKPT_BACKEND = "(has(self.backend) ? self.backend : 'gcs')"


def _loader_rule(rule: Rule[LoaderSettings]) -> Rule[BenchmarkSettings]:
    """A loader rule (``DATA_RULES``) on the checkpoint's ``data_loading`` group, CEL and check."""
    inner = rule.cel.replace("self.", "self.dataLoading.")
    return Rule(
        "data_loading",
        f"!has(self.dataLoading) || ({inner})",
        f"breaks the loader's rule on {to_camel(rule.field)}: {rule.text(to_camel)}",
        lambda s: s.data_loading is None or rule.check(s.data_loading),
    )


# The rules of a training step that reads from the loader (data_loading set).
_LOADER_RULES: tuple[Rule[BenchmarkSettings], ...] = (
    Rule(
        "data_loading",
        "!has(self.dataLoading) || has(self.trainEvery)",
        "needs {train_every}: the loader feeds the training steps, and trainEvery is how many "
        "steps each window of the interleaved measurement runs",
        lambda s: s.data_loading is None or s.train_every is not None,
    ),
    Rule(
        "data_loading",
        f"!has(self.dataLoading) || {_reader_scheme_cel(_LOADER_READER)} == "
        f"{_reader_scheme_cel(_CKPT_BACKEND)}",
        "must read where {backend} writes (its reader, dataLoading.backend, on the same store: "
        "gs readers beside gcs or gcsfs, s3 or s3fs beside s3 or s3fs, file beside file): the "
        "dataset lives under checkpointPath, so that reads and uploads compete as in a job",
        lambda s: s.data_loading is None or s.data_loading.backend.scheme == s.backend.scheme,
    ),
    Rule(
        "train_step_ms",
        "!has(self.dataLoading) || !has(self.trainStepMs)",
        "cannot be set with {data_loading}: the step's compute is then the loader's compute "
        "time per batch (dataLoading.computeSecondsPerBatch or its preset's)",
        lambda s: s.data_loading is None or s.train_step_ms is None,
    ),
    *(_loader_rule(rule) for rule in DATA_RULES),
)

# Every rule that spans the benchmark's settings, declared next to the settings it reads: the
# state's, how samples run, the storage's. The rank's config runs them all (config.py), and the
# CRD carries them as CEL with the CR's own rules (operator/spec/rules.py).
SETTINGS_RULES: tuple[Rule[BenchmarkSettings], ...] = (
    *STATE_RULES,
    *_RUN_RULES,
    *_LOADER_RULES,
    *STORAGE_RULES,
)


def declared() -> Iterator[Declared]:
    """The declared settings: the run's own in declaration order, then the storage backends'.
    Options, recorded settings and sweep axes follow this order (the last axis varies fastest)."""
    return declared_fields(BenchmarkSettings, first_from=StorageSettings)


def _declared_names() -> list[str]:
    return [d.name for d in declared()]


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
