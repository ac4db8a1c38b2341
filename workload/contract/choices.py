"""The named choices a benchmark makes (backend, procedure, collector, upload scheme, page cache),
and the sample counts each procedure runs when none are given.

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


class Strategy(enum.StrEnum):
    """How the state is laid out across ranks and checkpointed (docs/measurement.md)."""

    SHARDED = "sharded"  # each rank holds and saves its own shards (FSDP; DCP)
    FULL = "full"  # gathered to rank 0, saved as one object through the backend's stream
    REPLICATED = "replicated"  # every rank holds the whole state (DDP); DCP writes each item once


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


def default_samples(procedure: Procedure) -> int:
    """Timed samples when none are given: MLPerf Storage's 10 for mlperf, the reference's 8."""
    return MLPERF_CHECKPOINTS if procedure is Procedure.MLPERF else DEFAULT_SAMPLES


def default_warmups(procedure: Procedure) -> int:
    """Warm-ups when none are given: only ckptbench's own procedure runs one."""
    return 1 if procedure is Procedure.CKPTBENCH else 0
