"""The named choices a benchmark makes: storage backend, procedure, page cache, collector.

Their own module so that the pure parts of the contract (results, reports) and the configuration
share them without the configuration's size.
"""

from __future__ import annotations

import enum


class Backend(enum.StrEnum):
    FILE = "file"
    GCS = "gcs"
    GCSFS = "gcsfs"


class Procedure(enum.StrEnum):
    """How samples are run and figures computed (docs/measurement.md)."""

    CKPTBENCH = "ckptbench"  # warm-up, then save/load interleaved, each load on a fresh template
    REFERENCE = "reference"  # the reference's: all saves then all loads into one template
    MLPERF = "mlperf"  # MLPerf Storage's: 10 writes then 10 reads, span durations


MLPERF_CHECKPOINTS = 10


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
        """The scheme a run uses: ``auto`` is the XML multipart upload on GCS and a parallel
        composite upload against an emulator (``STORAGE_EMULATOR_HOST``), since no emulator
        implements the XML multipart upload. An explicit scheme is kept (a test shim gives an
        emulator the multipart upload)."""
        if self is not UploadScheme.AUTO:
            return self
        return UploadScheme.COMPOSE if emulator_host else UploadScheme.MULTIPART
