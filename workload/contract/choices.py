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


class Procedure(enum.StrEnum):
    """How samples are run and figures computed (docs/measurement.md)."""

    CKPTBENCH = "ckptbench"  # warm-up, then save/load interleaved, each load on a fresh template
    REFERENCE = "reference"  # the reference's: all saves then all loads into one template
    MLPERF = "mlperf"  # MLPerf Storage's: 10 writes then 10 reads, span durations


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
