"""The dataset's objects through each reader's client: written once by ``prepare``, then read by
ckptbench's own datasets (readers gcs, gcsfs, s3fs, file; dataflux and s3 bring their datasets).

A :class:`Store` makes its client in the process that uses it, on first use: DataLoader workers
are forked from the rank, and a client's connections must not be shared across a fork. Every
read goes through the storage layer's one retry policy (408, 429, 5xx, resets, bodies cut short),
each failed attempt counted by cause.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from ckptbench.workload.contract.data.choices import Reader
from ckptbench.workload.contract.data.config import DataConfig
from ckptbench.workload.storage import session
from ckptbench.workload.storage.gcs.client import make_client
from ckptbench.workload.storage.retry import (
    DEFAULT_POLICY,
    call_with_retry,
    is_retryable,
    status_of,
)
from ckptbench.workload.storage.retry_causes import RetryCauses

T = TypeVar("T")


class Store:
    """Whole and ranged reads and whole writes of the dataset's objects, by path or URL."""

    def __init__(self, config: DataConfig) -> None:
        self.reader = config.backend
        self.project = config.project
        self._service = config.model_copy()
        self._client: Any = None
        self._pid = -1
        self.retries = RetryCauses()

    # -- the client, per process ---------------------------------------------------------------

    def _get(self) -> Any:
        if self._client is None or self._pid != os.getpid():
            self._client = self._make()
            self._pid = os.getpid()
        return self._client

    def _make(self) -> Any:
        if self.reader in (Reader.GCS, Reader.DATAFLUX):
            return make_client(self.project)
        if self.reader is Reader.GCSFS:
            import fsspec

            return fsspec.filesystem(
                "gs", skip_instance_cache=True, **session.gcsfs_options(self._service)
            )
        if self.reader in (Reader.S3FS, Reader.S3):
            import fsspec

            return fsspec.filesystem(
                "s3", skip_instance_cache=True, **session.s3fs_options(self._service)
            )
        return None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        state["retries"] = RetryCauses()
        return state

    # -- reads and writes ------------------------------------------------------------------------

    def read(self, path: str, start: int = 0, length: int | None = None) -> bytes:
        """The object's bytes, or ``length`` of them from ``start``."""
        return self._retry(lambda: self._read(path, start, length), f"read {path}")

    def write(self, path: str, data: bytes) -> None:
        self._retry(lambda: self._write(path, data), f"write {path}")

    def exists(self, path: str) -> bool:
        return self._retry(lambda: self._exists(path), f"look up {path}")

    def _retry(self, fn: Callable[[], T], what: str) -> T:
        def attempt() -> T:
            try:
                return fn()
            except Exception as exc:
                if is_retryable(exc):
                    status = status_of(exc)
                    self.retries.note(f"HTTP {status}" if status else type(exc).__name__)
                raise

        return call_with_retry(attempt, what, DEFAULT_POLICY)

    def _read(self, path: str, start: int, length: int | None) -> bytes:
        client = self._get()
        if self.reader is Reader.FILE:
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read() if length is None else f.read(length)
                # Read cold next time too: the next epoch must reach the storage, not this cache.
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            return data
        if self.reader in (Reader.GCS, Reader.DATAFLUX):
            bucket, name = _split(path, "gs://")
            blob = client.bucket(bucket).blob(name)
            # retry=None: the library's own retries would hide the failed attempts from ours.
            if length is None and start == 0:
                return bytes(blob.download_as_bytes(checksum="crc32c", retry=None))
            end = None if length is None else start + length - 1  # inclusive
            return bytes(blob.download_as_bytes(start=start, end=end, checksum=None, retry=None))
        end = None if length is None else start + length
        return bytes(client.cat_file(path, start=start or None, end=end))

    def _write(self, path: str, data: bytes) -> None:
        client = self._get()
        if self.reader is Reader.FILE:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            return
        if self.reader in (Reader.GCS, Reader.DATAFLUX):
            bucket, name = _split(path, "gs://")
            blob = client.bucket(bucket).blob(name)
            blob.upload_from_string(data, checksum="crc32c", retry=None)
            return
        client.pipe_file(path, data)

    def _exists(self, path: str) -> bool:
        client = self._get()
        if self.reader is Reader.FILE:
            return os.path.exists(path)
        if self.reader in (Reader.GCS, Reader.DATAFLUX):
            bucket, name = _split(path, "gs://")
            return bool(client.bucket(bucket).blob(name).exists())
        client.invalidate_cache()
        return bool(client.exists(path))


def _split(url: str, scheme: str) -> tuple[str, str]:
    bucket, _, name = url.removeprefix(scheme).partition("/")
    return bucket, name
