"""Every setting a user can choose, declared once: one pydantic field of
:class:`BenchmarkSettings` (name, type, bounds, default, description) with its :class:`Setting`
metadata (unit, flag, laptop default, sweep axis, where it acts). Made from it: the rank's config
and its ``CKPTBENCH_*`` variables (``WorkloadConfig`` extends it), the CR field and its bounds
(the spec extends it), the ``ckptbench run`` option (:func:`declared`), the sweep axes, and the
record of settings in every result (:meth:`BenchmarkSettings.record`).

Adding a setting: declare it here, use it where it acts, document it. Nothing else names it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationInfo, field_validator
from pydantic.fields import FieldInfo

from ckptbench.workload.contract.checkpoint import models, sizes
from ckptbench.workload.contract.choices import (
    DEFAULT_SAMPLES,
    MLPERF_CHECKPOINTS,
    Backend,
    GarbageCollection,
    Procedure,
    S3PrefixStrategy,
    S3Reader,
    SaveMode,
    Stager,
    Strategy,
    UploadScheme,
    default_samples,
    default_warmups,
)

MIB = 1024**2
MAX_WORLD_SIZE = 10_000  # rank hostnames stay DNS labels (see operator/spec/names.py)
MAX_CHECKPOINTS_SAMPLES = 1000
REFERENCE_LAYER_SIZE = 100_000  # the reference's published table
REFERENCE_PADDING_SIZE = 196
TRAIN_MATRIX_MIN, TRAIN_MATRIX_MAX = 16, 16_384
# The largest side a step-time target may choose (3 matrices, 192 MiB): seconds per step on one
# CPU core already, and what the memory plan counts for a target.
TRAIN_TARGET_MATRIX_MAX = 4096
# S3's bucket names: 3 to 63 lowercase letters, digits, dots and dashes, starting and ending with
# a letter or digit (S3's rules; the ones a pattern cannot say are checked in s3_bucket_problem).
S3_BUCKET_PATTERN = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
# A local path, file://..., gs://bucket[/prefix] or s3://bucket[/prefix]: the schemes a backend
# may write to.
CHECKPOINT_PATH_PATTERN = (
    r"^(gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/\S*)?"
    rf"|s3://{S3_BUCKET_PATTERN}(/\S*)?|file:///\S*|/\S*)$"
)
S3_BACKENDS = ("s3", "s3fs")


def s3_bucket_problem(bucket: str) -> str | None:
    """Why ``bucket`` is not an S3 bucket name (S3's naming rules), or None when it is one."""
    if not bucket:
        return "no bucket"
    if not 3 <= len(bucket) <= 63:
        return f"{bucket!r} is not a bucket name: S3 bucket names are 3 to 63 characters"
    if not re.fullmatch(S3_BUCKET_PATTERN, bucket):
        return (
            f"{bucket!r} is not a bucket name: S3 bucket names hold lowercase letters, digits, "
            "dots and dashes, and start and end with a letter or digit"
        )
    if ".." in bucket:
        return f"{bucket!r} is not a bucket name: S3 bucket names hold no two dots in a row"
    if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", bucket):
        return f"{bucket!r} is not a bucket name: S3 bucket names are not IP addresses"
    if bucket.startswith(("xn--", "sthree-")) or bucket.endswith(("-s3alias", "--ol-s3")):
        return f"{bucket!r} is not a bucket name: S3 reserves that prefix or suffix"
    return None


# Staging options a CPU node cannot honour, and why (refused by name, never dropped).
NEEDS_CUDA = {
    "staging_pinned_memory": "pinned memory (StagingOptions.use_pinned_memory) needs a CUDA "
    "runtime; ckptbench's ranks run torch's CPU build on CPU nodes",
    "staging_non_blocking_copy": "a non-blocking copy (StagingOptions.use_non_blocking_copy) "
    "needs an accelerator, which CPU nodes do not have (DCP's DefaultStager asserts one)",
}


# -- what each declaration carries beside pydantic's field ---------------------------------------

_UNSET: Any = object()


@dataclass(frozen=True)
class Setting:
    """What a setting's pydantic field cannot say: how people reach it and compare with it.

    ``unit``: what a number counts; ``bytes`` also makes the option take sizes (``32MiB``).
    ``flag``: the ``ckptbench run`` option (default: ``--`` and the name with dashes); a boolean's
    flag is a switch that sets the opposite of its default. ``local_default``: the default of
    ``ckptbench run`` where a laptop needs a smaller one than a cluster (the spec's and the
    rank's default otherwise). ``axis``: a sweep may vary it (``ckptbench run`` with a comma
    list; a CheckpointBenchmarkSweep's axes and cells). ``runner``: the option is the local
    runner's own, which sets the field itself (``--storage`` also starts an emulator or not).
    ``backends`` and ``layout``: where the setting acts (empty: everywhere); a result records a
    setting only where it acted, so a gcsfs row shows no gcs thread count.
    """

    unit: str | None = None
    flag: str | None = None
    local_default: Any = _UNSET
    axis: bool = False
    metavar: str | None = None
    runner: bool = False
    backends: tuple[str, ...] = ()
    layout: str | None = None  # "model" or "reference": acts only with that layout

    def acts_in(self, settings: BenchmarkSettings) -> bool:
        if self.backends and settings.backend.value not in self.backends:
            return False
        if self.layout is not None:
            return self.layout == ("model" if settings.model is not None else "reference")
        return True

    def has_local_default(self) -> bool:
        return self.local_default is not _UNSET


def no_crd_default(schema: dict[str, Any]) -> None:
    """Leave a field's default out of the CRD schema (pydantic still applies it): CEL can then
    tell a spec that sets the field from one that does not (``has(self.layerSize)``)."""
    schema.pop("default", None)


def _choice(default: Any, description: str) -> Any:
    """A field holding one of an enum's values, or its value as the plain string a manifest or
    a variable holds (a strict enum would refuse it)."""
    return Field(default, strict=False, description=description)


# -- the declarations -----------------------------------------------------------------------------


class BenchmarkSettings(BaseModel):
    """The settings of one benchmark: the same for every rank, chosen by whoever runs it."""

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
    model: Annotated[models.Preset | None, Setting(axis=True, metavar="PRESET")] = _choice(
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
        _choice(
            models.Optimizer.ADAMW,
            "With model: optimizer state saved beside the weights: adamw (exp_avg, exp_avg_sq, "
            "step and param_groups, torchtitan's flattened names) or none.",
        )
    )
    dtype: Annotated[models.DtypeProfile, Setting(layout="model", axis=True, metavar="PROFILE")] = (
        _choice(
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
        description="With model: load on the first loadWorldSize ranks only (at most "
        "worldSize), resharding the checkpoint into that many pieces and verifying them (a "
        "restart on fewer nodes). Default: every rank.",
    )
    strategy: Annotated[Strategy, Setting(axis=True, metavar="NAME")] = _choice(
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
    procedure: Annotated[Procedure, Setting(axis=True, metavar="NAME")] = _choice(
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
    ] = _choice(
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
    save_mode: Annotated[SaveMode | None, Setting(axis=True, metavar="MODE")] = _choice(
        None,
        "How a save runs: sync (dcp.save: the caller waits until the checkpoint is durable), "
        "thread (dcp.async_save with DCP's thread checkpointer: the upload runs on a thread of "
        "the rank's process) or process (DCP's process checkpointer: the upload runs in a second "
        "process per rank, which holds its own interpreter and torch). Default: thread with "
        "asyncSave, sync otherwise. An async save reports the stall (the caller blocked), the "
        "staging copy when it runs apart from the call, and the background time until durable.",
    )
    stager: Annotated[Stager, Setting(axis=True, metavar="NAME")] = _choice(
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

    # -- where it goes, and how ------------------------------------------------------------------
    backend: Annotated[Backend, Setting(axis=True, metavar="NAME")] = _choice(
        Backend.GCS,
        "Storage backend: gcs (ckptbench's own writer and reader: each rank's file is cut into "
        "partSizeBytes parts uploaded by `threads` workers (see uploadScheme); loads are "
        "parallel ranged reads straight into the tensors), gcsfs (DCP's fsspec writer/reader "
        "over gcsfs, the reference's USE_FSSPEC), s3 (s3torchconnector's DCP writer and reader, "
        "AWS's CRT client), s3fs (DCP's fsspec writer/reader over s3fs, the baseline beside s3) or "
        "file (a local or mounted filesystem).",
    )
    checkpoint_path: Annotated[str, Setting(flag="--storage", runner=True, metavar="URL")] = Field(
        ...,
        min_length=1,
        max_length=1024,
        description="Where checkpoints and results go: gs://bucket/prefix for gcs and gcsfs, "
        "s3://bucket/prefix for s3 and s3fs, an absolute path for file (in a cluster, under a "
        "shared volumeMount when worldSize > 1). "
        "Each run writes under <checkpointPath>/<run>/ (the reference's CKPT_DIR_PATH).",
        # The API server checks the shape; Python checks it field by field, with messages that
        # say what is wrong (WorkloadConfig), rather than by a regular expression.
        json_schema_extra={"pattern": CHECKPOINT_PATH_PATTERN},
    )
    project: Annotated[str | None, Setting(backends=("gcs", "gcsfs"), metavar="ID")] = Field(
        None,
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9.:_-]*$",
        description="GCP project of the storage clients; default: the one of the credentials.",
    )
    drop_cache: Annotated[bool, Setting(backends=("file",), flag="--keep-cache", axis=True)] = (
        Field(
            True,
            description="Backend file: evict the written files from the node's page cache before "
            "each load, so loads read the storage (a network file system may still cache on its "
            "server; docs/measurement.md). False keeps the cache.",
        )
    )
    threads: Annotated[int, Setting(backends=("gcs",), unit="threads", axis=True)] = Field(
        8, ge=1, le=256, description="Transfer threads per rank (backend gcs)."
    )
    part_size_bytes: Annotated[
        int,
        Setting(backends=("gcs",), unit="bytes", flag="--part-size", axis=True, metavar="SIZE"),
    ] = Field(
        32 * MIB,
        ge=1 * MIB,
        le=5 * 1024 * MIB,
        description="Upload part and ranged download size in bytes (backend gcs); the "
        "multipart upload scheme raises it to GCS's 5 MiB minimum part.",
    )
    upload_scheme: Annotated[
        UploadScheme, Setting(backends=("gcs",), axis=True, metavar="SCHEME")
    ] = _choice(
        UploadScheme.AUTO,
        "Backend gcs: how a rank's parts become its object: multipart (GCS's XML multipart "
        "upload: no compose, no part deletes, what Google recommends for parallel uploads), "
        "compose (a parallel composite upload: parts as temporary objects, composed, then "
        "deleted) or auto (multipart on GCS; compose against an emulator, since none "
        "implements the XML multipart upload).",
    )
    checksums: Annotated[bool, Setting(backends=("gcs",), flag="--no-checksums", axis=True)] = (
        Field(
            True, description="Backend gcs: crc32c on every uploaded part and every read, checked."
        )
    )
    sync_files: Annotated[bool, Setting(backends=("gcsfs", "s3fs"), axis=True)] = Field(
        False,
        description="Backends gcsfs and s3fs: let DCP os.sync() the node after each file, as it "
        "does for streams without fileno() (off, as the reference runs it; on reproduces the old "
        "handicapped baseline).",
    )
    stall_seconds: Annotated[
        float, Setting(backends=("gcs",), unit="seconds", metavar="SECONDS")
    ] = Field(
        60.0,
        ge=1,  # not gt=0: Kubernetes' schema and JSON Schema disagree on exclusiveMinimum
        le=3600,
        description="Backend gcs: a transfer that moves no byte for this long is abandoned and "
        "retried.",
    )
    request_deadline_seconds: Annotated[
        float, Setting(backends=("gcs",), unit="seconds", metavar="SECONDS")
    ] = Field(
        900.0,
        ge=1,  # not gt=0: Kubernetes' schema and JSON Schema disagree on exclusiveMinimum
        le=86_400,
        description="Backend gcs: the most one request may take, retries included.",
    )
    s3_endpoint: Annotated[str | None, Setting(backends=S3_BACKENDS, metavar="URL")] = Field(
        None,
        min_length=1,
        max_length=1024,
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="Backends s3 and s3fs: the S3 endpoint (MinIO, Ceph RGW, R2 ...); default "
        "AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, else AWS's own for the region. `ckptbench run` "
        "with neither starts an embedded S3 server (moto).",
    )
    s3_region: Annotated[str | None, Setting(backends=S3_BACKENDS, metavar="REGION")] = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[a-z0-9-]+$",
        description="Backends s3 and s3fs: the bucket's region; default AWS_REGION or "
        "AWS_DEFAULT_REGION, else us-east-1.",
    )
    s3_path_style: Annotated[bool, Setting(backends=S3_BACKENDS)] = Field(
        False,
        description="Backends s3 and s3fs: path-style addressing (endpoint/bucket/key) instead of "
        "virtual-hosted (bucket.endpoint/key), as MinIO and most on-premises stores need. "
        "Always on for an endpoint given by IP address or localhost.",
    )
    s3_threads: Annotated[int, Setting(backends=("s3",), unit="threads", axis=True)] = Field(
        1,
        ge=1,
        le=256,
        description="Backend s3: writer threads per rank (s3torchconnector's thread_count: DCP "
        "splits each rank's items into this many objects, one stream each; 1 is the library's "
        "default). Each stream is itself uploaded in parallel parts by the CRT client.",
    )
    s3_prefix_strategy: Annotated[
        S3PrefixStrategy, Setting(backends=("s3",), axis=True, metavar="STRATEGY")
    ] = _choice(
        S3PrefixStrategy.NONE,
        "Backend s3: where each rank's objects go under the checkpoint (s3torchconnector's "
        "prefix strategies, its answer to 503 SlowDown): none (DCP's flat names), round-robin "
        "(16 folders, 0 to f), binary or hex (a reversed rank number as a leading folder).",
    )
    s3_part_size_bytes: Annotated[
        int,
        Setting(backends=("s3",), unit="bytes", flag="--s3-part-size", axis=True, metavar="SIZE"),
    ] = Field(
        8 * MIB,
        ge=5 * MIB,
        le=5 * 1024 * MIB,
        description="Backend s3: multipart upload part and ranged download size in bytes (S3's "
        "limits: 5 MiB to 5 GiB; the library's default 8 MiB).",
    )
    s3_throughput_gbps: Annotated[
        float, Setting(backends=("s3",), unit="Gbit/s", axis=True, metavar="GBPS")
    ] = Field(
        10.0,
        ge=1,  # not gt=0: Kubernetes' schema and JSON Schema disagree on exclusiveMinimum
        le=3200,
        description="Backend s3: the CRT client's throughput target per rank, in Gbit/s: it "
        "sizes its connection pool from it (the library's default 10).",
    )
    s3_reader: Annotated[S3Reader, Setting(backends=("s3",), axis=True, metavar="READER")] = (
        _choice(
            S3Reader.DCP_OPTIMIZED,
            "Backend s3: how loads read: dcp-optimized (ranged GETs of the items DCP plans, "
            "coalesced; the library's DCP default), sequential (one streamed GET per object) or "
            "ranged (a ranged GET per read).",
        )
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

    @field_validator("checkpoint_path")
    @classmethod
    def _path_shape(cls, value: str) -> str:
        # The same shape the CRD's pattern admits, refused with a reason rather than the pattern.
        if re.fullmatch(CHECKPOINT_PATH_PATTERN, value):
            problem = (
                s3_bucket_problem(value[len("s3://") :].split("/", 1)[0])
                if value.startswith("s3://")
                else None
            )
            if problem is None:
                return value
            raise ValueError(problem)
        if value.startswith("s3://"):
            problem = s3_bucket_problem(value[len("s3://") :].split("/", 1)[0])
            raise ValueError(
                f"{problem} in {value!r}" if problem is not None else "whitespace in the URL"
            )
        if value.startswith("gs://"):
            bucket = value[len("gs://") :].split("/", 1)[0]
            if not bucket:
                raise ValueError(f"no bucket in {value!r}")
            raise ValueError(
                f"{bucket!r} is not a bucket name: 3 to 222 characters of lowercase letters, "
                "digits, dots, dashes and underscores, starting and ending with a letter or digit"
            )
        raise ValueError(
            "must be gs://bucket/prefix, s3://bucket/prefix, file:///path or an absolute path, "
            "without whitespace"
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
    """The declared settings, in declaration order."""
    for name, info in BenchmarkSettings.model_fields.items():
        setting = next((m for m in info.metadata if isinstance(m, Setting)), None)
        if setting is None:
            raise TypeError(f"{name}: a benchmark setting needs its Setting metadata")
        yield Declared(name, info, setting)


def _declared_names() -> list[str]:
    return list(BenchmarkSettings.model_fields)


def axis_names() -> list[str]:
    """The settings a sweep may vary, in declaration order."""
    return [d.name for d in declared() if d.setting.axis]
