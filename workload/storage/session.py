"""DCP storage writers and readers for the three backends, from one storage session per rank.

``file`` and ``gcsfs`` are DCP's own (``FileSystemWriter``/``Reader`` and the fsspec ones over
gcsfs: the reference's baseline); ``gcs`` is ours, in :mod:`ckptbench.workload.storage.gcs.backend`,
imported only when asked for.

A rank opens one :class:`StorageSession` before its first timed operation and makes every writer
and reader from it, so the storage client (its credentials, token and connection pool) is made and
authenticated once, outside the timings, and reused by every sample, as a training job would.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter

from ckptbench.workload.contract.choices import Backend
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.names import EMULATOR_ENV, GCSFS_HNS_FLAG
from ckptbench.workload.storage.objects import DeleteOutcome
from ckptbench.workload.storage.paths import local_path
from ckptbench.workload.storage.retry import (
    DISCARD_SECONDS,
    RetryPolicy,
    call_with_retry,
    discard_policy,
)


class StorageSession:
    """One rank's storage: a client made once, and the writers and readers built on it.

    ``setup_seconds`` is how long making the client and authenticating took (the gcs backend
    fetches the bucket's metadata, gcsfs lists the bucket: either needs a token and opens a
    connection). ``read_paths`` counts, for the gcs backend, which path each loaded item took.
    """

    def __init__(self, config: WorkloadConfig) -> None:
        self.config = config
        self._gcs: Any = None
        self._gcsfs_options: dict[str, Any] = {}
        self._gcsfs: Any = None
        t0 = time.perf_counter()
        if config.backend is Backend.GCS:
            self._gcs = _gcs_filesystem(config)
        elif config.backend is Backend.GCSFS:
            self._gcsfs_options = gcsfs_options(config)
            self._gcsfs = _gcsfs_filesystem(config, self._gcsfs_options)
        self.setup_seconds = time.perf_counter() - t0

    def writer(self, checkpoint_id: str) -> StorageWriter:
        config = self.config
        if config.backend is Backend.FILE:
            return FileSystemWriter(str(local_path(checkpoint_id)))
        if config.backend is Backend.GCSFS:
            from ckptbench.workload.storage.torch_seam import FsspecWriter

            fsspec_writer: StorageWriter = FsspecWriter(
                checkpoint_id, sync_files=config.sync_files, **self._gcsfs_options
            )
            return fsspec_writer
        from ckptbench.workload.storage.gcs.backend import GcsStorageWriter

        return GcsStorageWriter(checkpoint_id, filesystem=self._gcs)

    def reader(self, checkpoint_id: str) -> StorageReader:
        config = self.config
        if config.backend is Backend.FILE:
            return FileSystemReader(str(local_path(checkpoint_id)))
        if config.backend is Backend.GCSFS:
            from ckptbench.workload.storage.gcsfs_backend import NamingFsspecReader

            fsspec_reader: StorageReader = NamingFsspecReader(checkpoint_id, **self._gcsfs_options)
            return fsspec_reader
        from ckptbench.workload.storage.gcs.backend import GcsStorageReader

        return GcsStorageReader(checkpoint_id, filesystem=self._gcs)

    @property
    def read_paths(self) -> dict[str, int] | None:
        if self._gcs is None:
            return None
        counts: dict[str, int] = self._gcs.read_paths.as_dict()
        return counts

    @property
    def filesystem(self) -> Any:
        """The gcs file system or the gcsfs instance every writer and reader shares (None for
        ``file``)."""
        return self._gcs if self._gcs is not None else self._gcsfs

    def discard(
        self, url: str, name_prefix: str, seconds: float = DISCARD_SECONDS
    ) -> DeleteOutcome:
        """Best-effort deletion after a failure, each request bounded so the whole stays near
        ``seconds``: what could not be removed is named in the outcome, never raised."""
        from ckptbench.workload.storage import objects

        client = self._gcs.client if self._gcs is not None else None
        quick = discard_policy(seconds, self.config.stall_seconds)
        return objects.delete_all(
            url,
            name_prefix=name_prefix,
            project=self.config.project,
            client=client,
            policy=quick,
            seconds=seconds,
        )

    def discard_failed(
        self, checkpoint_ids: list[str], rank: int, seconds: float = DISCARD_SECONDS
    ) -> str | None:
        """After a failure: delete what this rank left of ``checkpoint_ids`` (its own
        ``__{rank}_*`` objects and parts; rank 0 everything under them), best effort, within about
        ``seconds`` each. Returns what could not be removed, or None."""
        prefix = "" if rank == 0 else f"__{rank}_"
        left: list[str] = []
        first: str | None = None
        for checkpoint_id in checkpoint_ids:
            try:
                outcome = self.discard(checkpoint_id, prefix, seconds)
            except Exception as exc:  # discard never raises by design; this guards the report
                left.append(f"{checkpoint_id}/*")
                first = first or f"{type(exc).__name__}: {exc}"
                continue
            left += [f"{checkpoint_id}/{name}" for name in outcome.failed]
            first = first or outcome.first_error
        if not left:
            return None
        shown = ", ".join(left[:3]) + (" ..." if len(left) > 3 else "")
        return f"{len(left)} object(s): {shown} ({first})"[:1000]

    def delete_prefix(self, url: str, name_prefix: str = "") -> int:
        """Delete a checkpoint's objects (or files) under ``url`` starting with ``name_prefix``,
        with this session's client when it has one."""
        from ckptbench.workload.storage import objects

        client = self._gcs.client if self._gcs is not None else None
        return objects.delete_prefix(
            url, name_prefix=name_prefix, project=self.config.project, client=client
        )

    def close(self) -> None:
        if self._gcs is not None:
            self._gcs.client.close()
        self._gcs = None


def open_session(config: WorkloadConfig) -> StorageSession:
    return StorageSession(config)


def _gcs_filesystem(config: WorkloadConfig) -> Any:
    from ckptbench.workload.storage.gcs.backend import GcsFileSystem
    from ckptbench.workload.storage.gcs.client import make_client, split_gs_url

    # One pooled connection per worker, plus a few for metadata calls.
    client = make_client(config.project, pool_size=config.threads + 4)
    bucket, prefix = split_gs_url(config.checkpoint_path)
    # Authenticates (fetches a token) and opens a connection; a missing bucket fails here,
    # before any timing. Listing needs only the object permissions the benchmark needs anyway.
    policy = policy_for(config)
    call_with_retry(
        lambda: list(
            client.list_blobs(
                bucket, prefix=prefix, max_results=1, retry=None, timeout=policy.stall_seconds
            )
        ),
        f"listing gs://{bucket}/{prefix}",
        policy,
    )
    return GcsFileSystem(
        client=client,
        threads=config.threads,
        part_size_bytes=config.part_size_bytes,
        policy=policy_for(config),
        checksums=config.checksums,
        upload_scheme=config.upload_scheme,
        recipe=GcsRecipe(config),
    )


@dataclass(frozen=True)
class GcsRecipe:
    """Makes the gcs file system of these settings again, in another process (DCP's process
    checkpointer): picklable, and equal for equal settings, so that process makes one."""

    config: WorkloadConfig

    def __call__(self) -> Any:
        return _gcs_filesystem(self.config)


def policy_for(config: WorkloadConfig) -> RetryPolicy:
    return RetryPolicy(
        stall_seconds=config.stall_seconds, deadline_seconds=config.request_deadline_seconds
    )


def _gcsfs_filesystem(config: WorkloadConfig, options: dict[str, Any]) -> Any:
    import fsspec

    # fsspec caches file-system instances by their options: the FsspecWriter/Reader made later
    # with the same options get this very instance, with its token and connections.
    fs = fsspec.filesystem("gs", **options)
    bucket = config.checkpoint_path.removeprefix("gs://").split("/", 1)[0]
    fs.ls(bucket, detail=False)
    fs.invalidate_cache()  # later listings must see the objects, not this moment's
    return fs


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
    """Call before anything imports gcsfs (fsspec imports it lazily on the first gs:// URL).

    gcsfs's experimental zonal/HNS support probes every bucket, and against an emulator each probe
    stalls about 60 s; the flag is read when gcsfs is imported, so it must be set before that."""
    os.environ.setdefault(GCSFS_HNS_FLAG, "false")
