"""Backend ``dataflux``: Google's connector for PyTorch (gcs-torch-dataflux) as its users run it.

- Sharded saves (format ``dcp``): its ``GCSDistributedWriter`` / ``GCSDistributedReader``, DCP's
  ``FileSystemWriter`` / ``Reader`` over the connector's file system. Each of a rank's DCP files
  (``threads`` of them, DCP's ``thread_count``) is buffered whole in memory and uploaded, when
  its stream closes, through GCS's XML API multipart upload (32 MiB parts, 8 at once); each file
  is read back by one download of the whole object into memory.
- One object (format ``torch-save``): its ``DatafluxCheckpoint``: ``torch.save`` into its
  ``writer`` (the same buffered multipart upload), ``torch.load`` from its ``reader`` (one whole
  download).

The writer always uses the XML multipart upload, which no GCS emulator implements:
``ckptbench run`` puts its shim (:mod:`ckptbench.workload.local.loopback.xml_multipart`) in front
of the embedded emulator for this backend. Format safetensors is refused: the connector has no
Hugging Face writer.

Faults: the connector retries with google-cloud-storage's ``DEFAULT_RETRY`` inside its calls and
takes no retry of ours. The responses it retried are counted from the client's HTTP session
(:func:`count_retried_responses`): 408, 429 and 5xx. A connection reset or timeout raises before
any response, so those retries are not counted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from torch.distributed.checkpoint.storage import StorageReader, StorageWriter

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.storage.dataflux import dataflux_seam as seam
from ckptbench.workload.storage.dcp.files import keep_files
from ckptbench.workload.storage.gcs import google_seam
from ckptbench.workload.storage.gcs.client import make_client, split_gs_url
from ckptbench.workload.storage.retry_causes import RetryCauses
from ckptbench.workload.storage.traffic import TRAFFIC, CountingStream

# What a rank's retry warning names as the client that retried.
CLIENT = "gcs-torch-dataflux (google-cloud-storage's DEFAULT_RETRY)"
# The statuses google-cloud-storage's DEFAULT_RETRY retries (its _RETRYABLE_STATUS_CODES, and
# 408, which api_core's retry predicate takes as a timeout).
RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def count_retried_responses(client: Any, retries: RetryCauses) -> None:
    """Note every response of ``client``'s session that its library retries, by status."""

    def hook(response: Any, *args: Any, **kwargs: Any) -> Any:
        if response.status_code in RETRIED_STATUSES:
            retries.note(f"HTTP {response.status_code}")
        return response

    google_seam.session(client).hooks["response"].append(hook)


def files_per_rank(config: WorkloadConfig) -> int:
    """DCP's ``thread_count`` for the connector's writer: ``threads``, but no more than the items
    the rank writes. DCP writes one file per thread, so extra threads would write empty files,
    and an empty file cannot go up as an XML multipart upload (completing one needs a part), so
    the published writer fails that save. The extra threads would have had nothing to write."""
    if config.model is not None:
        return config.threads
    return max(1, min(config.threads, len(config.held_indices())))


class _CountedFiles:
    """The connector's file system, its bytes counted: each write as it is buffered (the buffer
    goes up whole), each read as the whole object its stream downloaded before DCP read from it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    @contextlib.contextmanager
    def create_stream(self, path: Any, mode: str) -> Iterator[Any]:
        with self.inner.create_stream(path, mode) as stream:
            if mode == "rb":
                TRAFFIC.add_received(stream.getbuffer().nbytes)
                yield stream
                return
            yield CountingStream(stream, TRAFFIC)


class DatafluxBackend:
    """One rank's google-cloud-storage client, and the connector's writers and readers on it."""

    def __init__(self, config: WorkloadConfig, retries: RetryCauses) -> None:
        self.config = config
        self.project = config.project or "ckptbench"
        self._writer_cls, self._reader_cls, self._checkpoint_cls = seam.checkpoint_classes()
        # Each of the rank's files uploads PARTS_PER_FILE parts at once: a pooled connection for
        # each, so no part queues for a socket.
        self.client = make_client(
            config.project, pool_size=config.threads * seam.PARTS_PER_FILE + 4
        )
        bucket, prefix = split_gs_url(config.checkpoint_path)
        # Authenticates and opens a connection before any timing; a missing bucket fails here.
        list(self.client.list_blobs(bucket, prefix=prefix, max_results=1))
        count_retried_responses(self.client, retries)

    def writer(
        self, checkpoint_id: str, writer_options: Mapping[str, Any] | None = None
    ) -> StorageWriter:
        """``writer_options``: more of DCP's ``FileSystemWriter``'s (compression's extensions),
        which the connector's writer passes on."""
        writer = self._writer_cls(
            checkpoint_id,
            self.project,
            storage_client=self.client,
            thread_count=files_per_rank(self.config),
            **dict(writer_options or {}),
        )
        writer.fs = _CountedFiles(writer.fs)
        # A file failing in one of DCP's other threads fails the save, not the next load.
        made: StorageWriter = keep_files(writer)
        return made

    def reader(self, checkpoint_id: str) -> StorageReader:
        reader = self._reader_cls(checkpoint_id, self.project, storage_client=self.client)
        reader.fs = _CountedFiles(reader.fs)
        made: StorageReader = reader
        return made

    @contextlib.contextmanager
    def object_stream(self, url: str, mode: str) -> Iterator[Any]:
        """The connector's single-object checkpoint: its ``writer`` buffers what ``torch.save``
        writes and uploads it on close; its ``reader`` downloads the object whole first."""
        bucket, name = split_gs_url(url)
        checkpoint = self._checkpoint_cls(self.project, bucket, storage_client=self.client)
        if mode == "wb":
            buffer = checkpoint.writer(name)
            counted = CountingStream(buffer, TRAFFIC)
            yield counted
            buffer.close()  # the upload
            return
        stream = checkpoint.reader(name)
        TRAFFIC.add_received(stream.getbuffer().nbytes)
        try:
            yield stream
        finally:
            stream.close()
