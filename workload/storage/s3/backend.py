"""Backend ``s3``: s3torchconnector's DCP writer and reader, as its authors ship them, over one
client per rank that carries the endpoint, region and addressing (see :mod:`.s3torch_seam`).

The CRT client under it retries throttling (503 SlowDown), server errors and broken connections
itself (``max_attempts``); what it cannot survive reaches DCP as an ``S3Exception``. It says why
it retried only in its own log, which :mod:`.crt_log` reads to count the causes per operation.
A 429 it does not retry (:mod:`.throttling`): the writer writes such a file again and the reader
reads it again (:mod:`ckptbench.workload.storage.dcp.files`), within ``request_deadline_seconds``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from torch.distributed.checkpoint.storage import StorageReader, StorageWriter

from ckptbench.workload.contract.choices import S3PrefixStrategy, S3Reader
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.storage.dcp.files import attempt, keep_files, retry_reads
from ckptbench.workload.storage.retry import RetryPolicy
from ckptbench.workload.storage.s3 import s3torch_seam as seam
from ckptbench.workload.storage.s3.throttling import throttled
from ckptbench.workload.storage.s3.where import S3Where, split_s3_url

T = TypeVar("T")

# The round-robin strategy's folders: 16, one hex digit each (the library takes any list).
ROUND_ROBIN_PREFIXES = [f"{i:x}" for i in range(16)]
# The library's default, passed so a result says what ran. In 1.5.0 it does not bound the CRT's
# own retries of a transfer (a client with 1 still survives 503s in a row; docs/storage.md).
MAX_ATTEMPTS = 10


def client_config(config: WorkloadConfig, where: S3Where) -> Any:
    return seam.S3ClientConfig(
        throughput_target_gbps=config.s3_throughput_gbps,
        part_size=config.s3_part_size_bytes,
        force_path_style=where.path_style,
        max_attempts=MAX_ATTEMPTS,
    )


def prefix_strategy(strategy: S3PrefixStrategy, world_size: int) -> Any:
    if strategy is S3PrefixStrategy.ROUND_ROBIN:
        return seam.RoundRobinPrefixStrategy(ROUND_ROBIN_PREFIXES)
    if strategy is S3PrefixStrategy.BINARY:
        return seam.BinaryPrefixStrategy(prefix_count=world_size)
    if strategy is S3PrefixStrategy.HEX:
        return seam.HexPrefixStrategy(prefix_count=world_size)
    return seam.DefaultPrefixStrategy()  # type: ignore[no-untyped-call]  # unannotated there


def reader_constructor(reader: S3Reader) -> Any:
    if reader is S3Reader.SEQUENTIAL:
        return seam.S3ReaderConstructor.sequential()
    if reader is S3Reader.RANGED:
        return seam.S3ReaderConstructor.range_based()
    return seam.S3ReaderConstructor.dcp_optimized()


class S3Backend:
    """One rank's s3 client, and the DCP writers and readers made over it."""

    def __init__(self, config: WorkloadConfig, where: S3Where) -> None:
        self.config = config
        self.where = where
        self._client_config = client_config(config, where)
        self.client = seam.make_client(where.region, where.endpoint, self._client_config)
        # Our retries of what the client does not retry: one operation's, within the deadline.
        self.policy = RetryPolicy(deadline_seconds=config.request_deadline_seconds)
        self.label = f"[rank {config.rank}] "

    def writer(
        self, checkpoint_id: str, writer_options: Mapping[str, Any] | None = None
    ) -> StorageWriter:
        """``writer_options``: more of DCP's FileSystemWriter's (torch_seam.extension_options),
        which S3StorageWriter passes on."""
        c = self.config
        writer = seam.S3StorageWriter(
            self.where.region,
            checkpoint_id,
            s3client_config=self._client_config,
            prefix_strategy=prefix_strategy(c.s3_prefix_strategy, c.world_size),
            thread_count=c.s3_threads,
            **dict(writer_options or {}),
        )
        made: StorageWriter = seam.inject_client(writer, self.where.region, self.client)
        return keep_files(made, throttled, self.policy, self.label)

    def reader(self, checkpoint_id: str) -> StorageReader:
        constructor = reader_constructor(self.config.s3_reader)
        reader = seam.S3StorageReader(
            self.where.region,
            checkpoint_id,
            s3client_config=self._client_config,
            reader_constructor=constructor,
        )
        made: StorageReader = seam.inject_client(
            reader, self.where.region, self.client, constructor
        )
        return retry_reads(made, throttled, self.policy, self.label)

    def attempt(self, fn: Callable[[], T], what: str) -> T:
        """``fn()`` (a whole transfer), again while it fails with a 429 the client gave up on."""
        return attempt(fn, f"{self.label}{what}", throttled, self.policy)

    def object_stream(self, url: str, mode: str) -> Any:
        """One object as a stream for ``torch.save``/``torch.load``: what the library's
        ``S3Checkpoint`` hands out (``put_object``/``get_object`` on its client), on this rank's
        client, which knows the endpoint."""
        bucket, key = split_s3_url(url)
        if mode == "wb":
            return self.client.put_object(bucket, key)
        return self.client.get_object(bucket, key)
