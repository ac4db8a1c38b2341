"""DCP storage writers and readers for the three backends, chosen by name.

``file`` and ``gcsfs`` are DCP's own (``FileSystemWriter``/``Reader`` and the fsspec ones over
gcsfs: the reference's baseline); ``gcs`` is ours, in :mod:`ckptbench.workload.storage.gcs.backend`,
imported only when asked for.
"""

from __future__ import annotations

import os
from typing import Any

from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter

from ckptbench.workload.contract.config import Backend, WorkloadConfig
from ckptbench.workload.contract.names import EMULATOR_ENV, GCSFS_HNS_FLAG

# gcsfs's experimental zonal/HNS support probes every bucket, and against an emulator each probe
# stalls about 60 s; the flag is read when gcsfs is imported, so it must be set before that.


def storage_writer(config: WorkloadConfig, checkpoint_id: str) -> StorageWriter:
    if config.backend is Backend.FILE:
        return FileSystemWriter(_local_path(checkpoint_id))
    if config.backend is Backend.GCSFS:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

        return FsspecWriter(checkpoint_id, **gcsfs_options(config))
    from ckptbench.workload.storage.gcs.backend import GcsStorageWriter

    writer: StorageWriter = GcsStorageWriter(
        checkpoint_id,
        project=config.project,
        threads=config.threads,
        part_size_bytes=config.part_size_bytes,
    )
    return writer


def storage_reader(config: WorkloadConfig, checkpoint_id: str) -> StorageReader:
    if config.backend is Backend.FILE:
        return FileSystemReader(_local_path(checkpoint_id))
    if config.backend is Backend.GCSFS:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        return FsspecReader(checkpoint_id, **gcsfs_options(config))
    from ckptbench.workload.storage.gcs.backend import GcsStorageReader

    reader: StorageReader = GcsStorageReader(
        checkpoint_id,
        project=config.project,
        threads=config.threads,
        part_size_bytes=config.part_size_bytes,
    )
    return reader


def gcsfs_options(config: WorkloadConfig) -> dict[str, Any]:
    """Keyword arguments for ``gcsfs.GCSFileSystem``: anonymous against an emulator."""
    prepare_gcsfs()
    options: dict[str, Any] = {}
    if config.project:
        options["project"] = config.project
    emulator = os.environ.get(EMULATOR_ENV)
    if emulator:
        if not emulator.startswith(("http://", "https://")):
            emulator = f"http://{emulator}"
        options["endpoint_url"] = emulator
        options["token"] = "anon"
    return options


def prepare_gcsfs() -> None:
    """Call before anything imports gcsfs (fsspec imports it lazily on the first gs:// URL)."""
    os.environ.setdefault(GCSFS_HNS_FLAG, "false")


def _local_path(checkpoint_id: str) -> str:
    return checkpoint_id.removeprefix("file://")
