"""The named choices a benchmark makes (backend, procedure, collector, upload scheme, page cache,
save mode, stager), and the sample counts each procedure runs when none are given.

The values settings take and results report: the declarations (``settings.py``), the results
(``results.py``) and the storage backends all name them.
"""

from __future__ import annotations

import enum

MLPERF_CHECKPOINTS = 10  # MLPerf Storage: 10 writes, then 10 reads
DEFAULT_SAMPLES = 8  # the reference's SAMPLE_COUNT


class Backend(enum.StrEnum):
    FILE = "file"
    GCS = "gcs"
    GCSFS = "gcsfs"
    S3 = "s3"  # s3torchconnector's DCP writer and reader (AWS's CRT client)
    S3FS = "s3fs"  # DCP's fsspec writer and reader over s3fs: the baseline beside s3
    # Google's connector (gcs-torch-dataflux): its DCP writer and reader, its one-object checkpoint
    DATAFLUX = "dataflux"

    @property
    def scheme(self) -> str:
        """The URL scheme the backend's checkpoint path takes ("" for a local path)."""
        return _SCHEMES[self]


_SCHEMES = {
    Backend.FILE: "",
    Backend.GCS: "gs://",
    Backend.GCSFS: "gs://",
    Backend.S3: "s3://",
    Backend.S3FS: "s3://",
    Backend.DATAFLUX: "gs://",
}


class S3PrefixStrategy(enum.StrEnum):
    """Where the s3 backend puts each rank's objects (s3torchconnector's prefix strategies, its
    answer to 503 SlowDown: S3 scales request rates per key prefix)."""

    NONE = "none"  # <checkpoint>/__<rank>_<n>.distcp, as DCP names them
    ROUND_ROBIN = "round-robin"  # <checkpoint>/<rank mod 16, one hex digit>/__<rank>_...
    BINARY = "binary"  # <checkpoint>/<rank in binary, reversed, 10 digits>/__<rank>_...
    HEX = "hex"  # <checkpoint>/<rank in hex, reversed, 10 digits>/__<rank>_...


class S3Reader(enum.StrEnum):
    """How the s3 backend reads a rank's objects (s3torchconnector's reader constructors)."""

    SEQUENTIAL = "sequential"  # one GET streamed from the start, buffered whole
    RANGED = "ranged"  # a ranged GET per read(), with a small buffer
    DCP_OPTIMIZED = "dcp-optimized"  # ranged GETs of coalesced item ranges (DCP's own plan)


class Procedure(enum.StrEnum):
    """How samples are run and figures computed (docs/measurement.md)."""

    CKPTBENCH = "ckptbench"  # warm-up, then save/load interleaved, each load on a fresh template
    REFERENCE = "reference"  # the reference's: all saves then all loads into one template
    MLPERF = "mlperf"  # MLPerf Storage's: 10 writes then 10 reads, span durations


class Strategy(enum.StrEnum):
    """How the state is laid out across ranks and checkpointed (docs/measurement.md)."""

    SHARDED = "sharded"  # each rank holds and saves its own shards (FSDP; DCP)
    FULL = "full"  # gathered to rank 0, saved as one object through the backend's stream
    REPLICATED = "replicated"  # every rank holds the whole state (DDP); DCP writes each item once


class Format(enum.StrEnum):
    """What a checkpoint is written as (docs/storage.md, "Formats")."""

    DCP = "dcp"  # DCP's own: one torch.save-framed file per rank and a .metadata
    # DCP's Hugging Face writer and reader: safetensors files, consolidated on the coordinator
    SAFETENSORS = "safetensors"
    TORCH_SAVE = "torch-save"  # one torch.save object of the whole state from rank 0 (Lightning's)


class Compression(enum.StrEnum):
    """How DCP's writer transforms each file's stream (its extensions)."""

    NONE = "none"
    ZSTD = "zstd"  # DCP's ZStandard stream extension


class CacheMode(enum.StrEnum):
    """Whether the ``file`` backend's written files were evicted from the page cache."""

    DROPPED = "dropped"
    KEPT = "kept"


class GarbageCollection(enum.StrEnum):
    """How a rank runs Python's cyclic garbage collector (docs/measurement.md)."""

    # torchtitan's way (Megatron-LM's --manual-gc, NeMo's gc_interval): automatic collection off,
    # a collection between checkpoints, outside the timings.
    MANUAL = "manual"
    AUTOMATIC = "automatic"  # Python's default: collections whenever allocations trigger them


class UploadScheme(enum.StrEnum):
    """How the gcs backend turns one rank's parts into its object (docs/storage.md)."""

    # GCS's XML multipart upload on GCS itself, parallel composite upload against an emulator
    # (STORAGE_EMULATOR_HOST set): no emulator implements the XML multipart upload.
    AUTO = "auto"
    COMPOSE = "compose"  # parts as temporary objects, composed, then deleted
    MULTIPART = "multipart"  # GCS's XML API multipart upload: no compose, no part deletes

    def resolve(self, emulator_host: str | None) -> UploadScheme:
        """The scheme a run uses; an explicit one is kept (a test shim gives an emulator the
        multipart upload)."""
        if self is not UploadScheme.AUTO:
            return self
        return UploadScheme.COMPOSE if emulator_host else UploadScheme.MULTIPART


class SaveMode(enum.StrEnum):
    """How a save runs (docs/measurement.md, "Async saves")."""

    SYNC = "sync"  # dcp.save: the caller waits until the checkpoint is durable
    THREAD = "thread"  # dcp.async_save with DCP's thread checkpointer (the upload on a thread)
    PROCESS = "process"  # dcp.async_save with DCP's process checkpointer (a second process)

    @property
    def is_async(self) -> bool:
        return self is not SaveMode.SYNC


class Stager(enum.StrEnum):
    """What copies the shard before an async save uploads it (DCP's AsyncStager)."""

    # DCP's BlockingAsyncStager, as the storage writer provides it: the copy runs inside the call.
    BLOCKING = "blocking"
    # DCP's DefaultStager(StagingOptions(...)) with the staging options the settings choose.
    DEFAULT = "default"


def default_samples(procedure: Procedure) -> int:
    """Timed samples when none are given: MLPerf Storage's 10 for mlperf, the reference's 8."""
    return MLPERF_CHECKPOINTS if procedure is Procedure.MLPERF else DEFAULT_SAMPLES


def default_warmups(procedure: Procedure) -> int:
    """Warm-ups when none are given: only ckptbench's own procedure runs one."""
    return 1 if procedure is Procedure.CKPTBENCH else 0
