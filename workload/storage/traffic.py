"""Bytes this rank moves to and from storage, counted where they cross the storage boundary.

One counter per process (:data:`TRAFFIC`; a rank is a process), fed by every backend:

- ``file`` and ``gcsfs``: DCP's ``FileSystemWriter``/``FileSystemReader`` (and its fsspec
  subclasses) open every file through their ``fs.create_stream``; :class:`CountingFileSystem`
  wraps that ``fs`` and counts the bytes written to and read from each stream. For gcsfs the
  bytes fsspec fetched over the network replace the bytes it handed over when it fetched more
  (its read-ahead cache): :func:`_fetched`.
- ``gcs``: our own requests count their bodies (``gcs/objects.py``, ``gcs/multipart.py``).

From the counter come a load's **read amplification** (bytes read from storage during
``read_data`` over the stored bytes the load plan needs, :func:`needed_bytes`, measured by
:class:`~ckptbench.workload.storage.timing.TimedReader`) and a rank's bytes sent and received.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan


class Traffic:
    """Bytes sent to and received from storage by this process, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent = 0
        self.received = 0

    def add_sent(self, n: int) -> None:
        with self._lock:
            self.sent += n

    def add_received(self, n: int) -> None:
        with self._lock:
            self.received += n


TRAFFIC = Traffic()
"""This process's (one rank's) traffic with storage, every backend."""


class CountingStream:
    """A stream that forwards every call to ``inner`` and counts the bytes read and written."""

    def __init__(self, inner: Any, traffic: Traffic) -> None:
        self._inner = inner
        self._traffic = traffic
        self._delivered = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> CountingStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, size: int | None = -1) -> bytes:
        data: bytes = self._inner.read(size)
        self._got(len(data))
        return data

    def read1(self, size: int = -1) -> bytes:
        data: bytes = self._inner.read1(size)
        self._got(len(data))
        return data

    def readinto(self, buffer: Any) -> int:
        n: int | None = self._inner.readinto(buffer)
        self._got(n or 0)
        return n or 0

    def readinto1(self, buffer: Any) -> int:
        n: int | None = self._inner.readinto1(buffer)
        self._got(n or 0)
        return n or 0

    def readline(self, size: int | None = -1) -> bytes:
        data: bytes = self._inner.readline(size)
        self._got(len(data))
        return data

    def write(self, data: Any) -> int:
        n: int | None = self._inner.write(data)
        sent = n if n is not None else memoryview(data).nbytes
        self._traffic.add_sent(sent)
        return sent

    def settle(self) -> None:
        """When the stream fetched more than it handed over (fsspec's read-ahead), count the
        difference: the bytes came from storage all the same."""
        fetched = _fetched(self._inner)
        if fetched is not None and fetched > self._delivered:
            self._traffic.add_received(fetched - self._delivered)
            self._delivered = fetched

    def _got(self, n: int) -> None:
        self._delivered += n
        self._traffic.add_received(n)


def _fetched(stream: Any) -> int | None:
    """Bytes an fsspec file fetched from storage: its cache's ``total_requested_bytes`` (every
    fsspec cache keeps it; written for fsspec 2026.9.0). None for any other stream."""
    total = getattr(getattr(stream, "cache", None), "total_requested_bytes", None)
    return total if isinstance(total, int) else None


class CountingFileSystem:
    """DCP's ``FileSystemBase`` (local or fsspec) whose streams count their bytes."""

    def __init__(self, inner: Any, traffic: Traffic = TRAFFIC) -> None:
        self.inner = inner
        self._traffic = traffic

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __getstate__(self) -> dict[str, Any]:
        # DCP's process checkpointer receives the writer pickled: the copy counts into the
        # counter of the process it writes from (a lock does not pickle, and this process's
        # counter would not see the bytes anyway; timing.py brings them back).
        return {"inner": self.inner}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.inner = state["inner"]
        self._traffic = TRAFFIC

    @contextmanager
    def create_stream(self, path: Any, mode: str) -> Iterator[CountingStream]:
        with self.inner.create_stream(path, mode) as stream:
            counted = CountingStream(stream, self._traffic)
            try:
                yield counted
            finally:
                counted.settle()


T = TypeVar("T")


def count_traffic(writer_or_reader: T) -> T:
    """Make a DCP ``FileSystemWriter``/``FileSystemReader`` (or fsspec one) count its bytes."""
    target: Any = writer_or_reader
    if not isinstance(target.fs, CountingFileSystem):
        target.fs = CountingFileSystem(target.fs)
    return writer_or_reader


def needed_bytes(plan: LoadPlan, metadata: Metadata, storage_data: dict[Any, Any]) -> int | None:
    """The stored bytes a load plan needs: for each item, its stored blob (framing included)
    scaled to the part of the saved chunk the rank needs. A rank loading a whole saved chunk
    needs its whole blob; on a resharding load it may need half a chunk, and a reader that
    reads the chunk whole then reads twice what it needs. None when the items are not blobs
    of a known length (DCP's Hugging Face reader: safetensors' memory map reads them, past
    every stream that counts bytes)."""
    total = 0
    for req in plan.items:
        length = getattr(storage_data[req.storage_index], "length", None)
        if length is None:
            return None
        stored = int(length)
        if req.type == LoadItemType.BYTE_IO:
            total += stored
            continue
        whole = _chunk_elements(metadata, req.storage_index)
        part = math.prod(req.lengths)
        total += stored if whole in (None, 0) or part >= whole else stored * part // whole
    return total


def _chunk_elements(metadata: Metadata, index: Any) -> int | None:
    entry = metadata.state_dict_metadata.get(index.fqn)
    if not isinstance(entry, TensorStorageMetadata):
        return None
    offsets = list(index.offset) if index.offset is not None else None
    for chunk in entry.chunks:
        if offsets is None or list(chunk.offsets) == offsets:
            return math.prod(chunk.sizes)
    return None
