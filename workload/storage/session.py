"""DCP storage writers and readers for every backend, from one storage session per rank.

``file``, ``gcsfs`` and ``s3fs`` are DCP's own (``FileSystemWriter``/``Reader`` and the fsspec ones
over gcsfs or s3fs: the baselines); ``gcs`` is ours, in
:mod:`ckptbench.workload.storage.gcs.backend`; ``s3`` is s3torchconnector's, in
:mod:`ckptbench.workload.storage.s3.backend`; ``dataflux`` is Google's connector's, in
:mod:`ckptbench.workload.storage.dataflux.backend`. Each is imported only when asked for.

A rank opens one :class:`StorageSession` before its first timed operation and makes every writer
and reader from it, so the storage client (its credentials, token and connection pool) is made and
authenticated once, outside the timings, and reused by every sample, as a training job would.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.hf_storage import HuggingFaceStorageReader
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter

from ckptbench.workload.contract.choices import Backend, Format
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.names import EMULATOR_ENV, GCSFS_HNS_FLAG
from ckptbench.workload.contract.storage_settings import ServiceSettings
from ckptbench.workload.storage.file import backend as file_backend
from ckptbench.workload.storage.file.paths import local_path
from ckptbench.workload.storage.outcome import DeleteOutcome
from ckptbench.workload.storage.retry import (
    DISCARD_SECONDS,
    RetryPolicy,
    call_with_retry,
    discard_policy,
)
from ckptbench.workload.storage.retry_causes import RetryCauses, report
from ckptbench.workload.storage.torch_seam import extension_options
from ckptbench.workload.storage.traffic import (
    TRAFFIC,
    CountingFileSystem,
    CountingStream,
    count_traffic,
)

# A data object's name starts with its writer's rank (``__{rank}_``); anything else under a
# checkpoint (.metadata) is rank 0's to delete.
_RANK_PREFIX = re.compile(r"^__(\d+)_")


def owner(name: str) -> int | None:
    """The rank whose data object ``name`` is (relative to its checkpoint), or None: rank 0's."""
    found = _RANK_PREFIX.match(name)
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class Discarded:
    """What a rank's cleanup after a failure could not remove: a line for its log (a count, the
    first names, the first error), and how many of those objects were its own to delete. Rank
    0 tries every object of a checkpoint, but counts only its own, so the ranks' counts add up
    to the objects left without counting one twice."""

    text: str
    own: int


class StorageSession:
    """One rank's storage: a client made once, and the writers and readers built on it.

    ``setup_seconds`` is how long making the client and authenticating took (the gcs backend
    fetches the bucket's metadata, gcsfs lists the bucket: either needs a token and opens a
    connection). ``read_paths`` counts, for the gcs backend, which path each loaded item took.
    The S3 backends' clients and Google's connector retry by themselves; :meth:`report_retries`
    says how often and why.
    """

    def __init__(self, config: WorkloadConfig) -> None:
        self.config = config
        self._gcs: Any = None
        self._gcsfs_options: dict[str, Any] = {}
        self._gcsfs: Any = None
        self._s3: Any = None
        self._dataflux: Any = None
        self.retries = RetryCauses()
        self._retry_client = ""
        self._crt_log: Any = None
        self._uninstall_s3fs_log: Any = None
        t0 = time.perf_counter()
        if config.backend is Backend.GCS:
            self._gcs = _gcs_filesystem(config)
        elif config.backend is Backend.GCSFS:
            self._gcsfs_options = gcsfs_options(config)
            self._gcsfs = _gcsfs_filesystem(config, self._gcsfs_options)
            # Checkpoints are deleted through a google-cloud-storage client (delete_prefix):
            # made here, before timing, so the first timed delete does not pay for it.
            from ckptbench.workload.storage import objects

            objects.shared_client(config.project)
        elif config.backend is Backend.S3:
            from ckptbench.workload.storage.s3 import crt_log

            # Before s3torchconnector is imported: it reads its log settings then.
            self._crt_log = crt_log.start()
            self._retry_client = crt_log.CLIENT
            self._s3 = _s3_backend(config)
        elif config.backend is Backend.DATAFLUX:
            from ckptbench.workload.storage.dataflux.backend import CLIENT, DatafluxBackend

            self._retry_client = CLIENT
            self._dataflux = DatafluxBackend(config, self.retries)
        elif config.backend is Backend.S3FS:
            from ckptbench.workload.storage.s3 import s3fs_log

            self._uninstall_s3fs_log = s3fs_log.install(self.retries)
            self._retry_client = s3fs_log.CLIENT
            self._gcsfs_options = s3fs_options(config)
            self._gcsfs = _s3fs_filesystem(config, self._gcsfs_options)
            s3fs_log.watch_client(self._gcsfs.s3, self.retries)
        self.setup_seconds = time.perf_counter() - t0

    def writer(self, checkpoint_id: str) -> StorageWriter:
        config = self.config
        # DCP's extensions for the compression chosen (none: no argument at all).
        extensions = extension_options(config.compression)
        if config.backend is Backend.FILE:
            # A full disk is named as such (ENOSPC, the path, the bytes), not as torch's
            # "unexpected pos".
            made = file_backend.writer(
                checkpoint_id,
                config.shard_bytes,
                config.total_bytes,
                safetensors=config.format is Format.SAFETENSORS,
                **extensions,
            )
            return count_traffic(made)
        if self._dataflux is not None:
            dataflux_writer: StorageWriter = self._dataflux.writer(checkpoint_id, extensions)
            return dataflux_writer
        if self._s3 is not None:
            s3_writer: StorageWriter = count_traffic(self._s3.writer(checkpoint_id, extensions))
            return s3_writer
        if config.backend in (Backend.GCSFS, Backend.S3FS):
            from ckptbench.workload.storage import gcsfs_backend

            return gcsfs_backend.writer(config, checkpoint_id, self._gcsfs_options, extensions)
        from ckptbench.workload.storage.gcs.backend import GcsStorageWriter

        return GcsStorageWriter(checkpoint_id, extensions, filesystem=self._gcs)

    def reader(self, checkpoint_id: str) -> StorageReader:
        config = self.config
        if config.backend is Backend.FILE:
            path = str(local_path(checkpoint_id))
            if config.format is Format.SAFETENSORS:
                return count_traffic(HuggingFaceStorageReader(path))
            return count_traffic(FileSystemReader(path))
        if self._dataflux is not None:
            dataflux_reader: StorageReader = self._dataflux.reader(checkpoint_id)
            return dataflux_reader
        if self._s3 is not None:
            s3_reader: StorageReader = count_traffic(self._s3.reader(checkpoint_id))
            return s3_reader
        if config.backend in (Backend.GCSFS, Backend.S3FS):
            from ckptbench.workload.storage import gcsfs_backend

            return gcsfs_backend.reader(config, checkpoint_id, self._gcsfs, self._gcsfs_options)
        from ckptbench.workload.storage.gcs.backend import GcsStorageReader

        return GcsStorageReader(checkpoint_id, filesystem=self._gcs)

    @contextlib.contextmanager
    def object_stream(self, url: str, mode: str, expected_bytes: int = 0) -> Iterator[Any]:
        """One object as a stream, through this backend, its bytes counted: what ``torch.save``
        into a writer (PyTorch Lightning's non-sharded checkpoint) writes to and reads from.
        ``expected_bytes`` sizes the gcs backend's upload parts."""
        config = self.config
        if config.backend is Backend.FILE:
            path = local_path(url)
            if mode == "wb":
                path.parent.mkdir(parents=True, exist_ok=True)
            # A full disk is named (ENOSPC, the path, the bytes) here too.
            local = file_backend.ReportingFileSystem(expected_bytes, expected_bytes)
            with CountingFileSystem(local).create_stream(path, mode) as stream:
                yield stream
                if mode == "wb":  # durable, as DCP's file writer makes its files
                    stream.flush()
                    os.fsync(stream.fileno())
            return
        if self._dataflux is not None:
            with self._dataflux.object_stream(url, mode) as stream:  # counts its own bytes
                yield stream
            return
        if self._s3 is not None or config.backend in (Backend.GCSFS, Backend.S3FS):
            inner = (
                self._s3.object_stream(url, mode)
                if self._s3 is not None
                else self._gcsfs.open(url, mode)
            )
            counted = CountingStream(inner, TRAFFIC)
            try:
                yield counted
            finally:
                counted.settle()
                counted.close()
            return
        from ckptbench.workload.storage.gcs.backend import Upload

        gcs = self._gcs
        with contextlib.ExitStack() as stack:
            if mode == "wb":
                stack.enter_context(gcs.uploading(Upload(expected_bytes)))
            # Its own requests count their bytes (gcs/objects.py).
            yield stack.enter_context(gcs.create_stream(url, mode))

    def retried(self, fn: Callable[[], Any], what: str) -> Any:
        """``fn()``, again while it fails for a cause the client does not retry (s3: a 429)."""
        return fn() if self._s3 is None else self._s3.attempt(fn, what)

    @property
    def read_paths(self) -> dict[str, int] | None:
        if self._gcs is None:
            return None
        counts: dict[str, int] = self._gcs.read_paths.as_dict()
        return counts

    @property
    def filesystem(self) -> Any:
        """The gcs file system or the gcsfs/s3fs instance all writers and readers share, or None."""
        return self._gcs if self._gcs is not None else self._gcsfs

    def discard(
        self, url: str, name_prefix: str, seconds: float = DISCARD_SECONDS
    ) -> DeleteOutcome:
        """Best-effort deletion after a failure, each request bounded so the whole stays near
        ``seconds``: what could not be removed is named in the outcome, never raised."""
        from ckptbench.workload.storage import objects

        client = self._client()
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
    ) -> Discarded | None:
        """After a failure: delete what this rank left of ``checkpoint_ids`` (its own
        ``__{rank}_*`` objects and parts; rank 0 everything under them), best effort, within about
        ``seconds`` each. Returns what could not be removed, or None."""
        prefix = "" if rank == 0 else f"__{rank}_"
        left: list[str] = []
        own = 0
        first: str | None = None
        for checkpoint_id in checkpoint_ids:
            try:
                outcome = self.discard(checkpoint_id, prefix, seconds)
            except Exception as exc:  # discard never raises by design; this guards the report
                left.append(f"{checkpoint_id}/*")
                first = first or f"{type(exc).__name__}: {exc}"
                continue
            left += [f"{checkpoint_id}/{name}" for name in outcome.failed]
            own += sum(1 for name in outcome.failed if owner(name) in (None, rank))
            first = first or outcome.first_error
        if not left:
            return None
        shown = ", ".join(left[:3]) + (" ..." if len(left) > 3 else "")
        return Discarded(f"{len(left)} object(s): {shown} ({first})"[:1000], own)

    def delete_prefix(self, url: str, name_prefix: str = "") -> int:
        """Delete a checkpoint's objects (or files) under ``url`` starting with ``name_prefix``,
        with this session's client when it has one."""
        from ckptbench.workload.storage import objects

        client = self._client()
        return objects.delete_prefix(
            url, name_prefix=name_prefix, project=self.config.project, client=client
        )

    def _client(self) -> Any:
        """This session's google-cloud-storage client, if it has one (gcs, dataflux)."""
        if self._gcs is not None:
            return self._gcs.client
        return self._dataflux.client if self._dataflux is not None else None

    def report_retries(self, what: str) -> str | None:
        """Log, as one warning, the request attempts that failed and that the S3 client retried
        by itself since the last report (``what`` names the operation); returns the message."""
        if self._crt_log is not None:
            self._crt_log.collect(self.retries)
        return report(what, self._retry_client, self.retries.drain())

    def close(self) -> None:
        if self._gcs is not None:
            self._gcs.client.close()
        if self._dataflux is not None:
            self._dataflux.client.close()
        self._gcs = self._dataflux = None
        with contextlib.suppress(Exception):  # what came after the last timed operation
            self.report_retries(f"[rank {self.config.rank}] outside the timed operations")
        if self._crt_log is not None:
            self._crt_log.close()
            self._crt_log = None
        if self._uninstall_s3fs_log is not None:
            self._uninstall_s3fs_log()
            self._uninstall_s3fs_log = None


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


def prepare_s3(config: ServiceSettings) -> Any:
    """Resolve the S3 service of an s3 or s3fs rank once (settings over the AWS variables) and
    make it the process's, so results and cleanup go where the checkpoints go."""
    from ckptbench.workload.storage.s3 import where

    found = where.resolve(config.s3_endpoint, config.s3_region, config.s3_path_style)
    where.configure(found)
    return found


def _s3_backend(config: WorkloadConfig) -> Any:
    from ckptbench.workload.storage.s3.backend import S3Backend
    from ckptbench.workload.storage.s3.where import split_s3_url

    backend = S3Backend(config, prepare_s3(config))
    bucket, prefix = split_s3_url(config.checkpoint_path)
    # Makes the CRT client, finds the credentials and opens a connection before any timing; a
    # missing bucket or refused credentials fail here.
    next(iter(backend.client.list_objects(bucket, prefix=prefix, max_keys=1)), None)
    return backend


def _s3fs_filesystem(config: WorkloadConfig, options: dict[str, Any]) -> Any:
    import fsspec

    from ckptbench.workload.storage.s3.where import split_s3_url

    # As for gcsfs: the FsspecWriter/Reader made later with these options get this instance.
    fs = fsspec.filesystem("s3", **options)
    bucket, _ = split_s3_url(config.checkpoint_path)
    fs.ls(bucket, detail=False)
    fs.invalidate_cache()
    return fs


def s3fs_options(config: ServiceSettings) -> dict[str, Any]:
    """Keyword arguments for ``s3fs.S3FileSystem``: the endpoint, region and addressing of the
    settings (or the AWS variables); credentials from the standard chain."""
    where = prepare_s3(config)
    options: dict[str, Any] = {"client_kwargs": {"region_name": where.region}}
    if where.endpoint:
        options["endpoint_url"] = where.endpoint
    if where.path_style:
        options["config_kwargs"] = {"s3": {"addressing_style": "path"}}
    return options


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


def gcsfs_options(config: ServiceSettings) -> dict[str, Any]:
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
