"""The datasets the readers' libraries ship, wrapped so that each hands on the same items as
ckptbench's own: gcs-torch-dataflux's (through :mod:`.dataflux_datasets`) and s3torchconnector's
``S3MapDataset`` / ``S3IterableDataset`` (their public constructors, given the endpoint).

Each lists the dataset's prefix itself when it is built: the listing is timed apart (``listing
seconds``). Requests are the library's own and not counted; s3torchconnector's are retried once
more where its client gives up on a 429 (:class:`ReadS3`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch.utils.data as tud

from ckptbench.workload.contract.choices import S3Reader
from ckptbench.workload.contract.data.config import DataConfig
from ckptbench.workload.contract.data.layout import Dataset
from ckptbench.workload.rank.data import content, dataflux_datasets
from ckptbench.workload.rank.data.batches import Item
from ckptbench.workload.rank.data.datasets import files_of
from ckptbench.workload.storage import session
from ckptbench.workload.storage.dcp.files import attempt
from ckptbench.workload.storage.s3.throttling import throttled


def _items(ds: Dataset, name: str, data: bytes) -> Iterator[Item]:
    f = ds.file_index(name)
    for k, sample in enumerate(content.decode_file(ds.format, data, ds.sample_bytes)):
        yield Item(sample, asked=f * ds.samples_per_file + k)


def _split_gs(url: str) -> tuple[str, str]:
    bucket, _, prefix = url.removeprefix("gs://").partition("/")
    return bucket, prefix


class DatafluxSamples(tud.Dataset[Item]):
    """``DataFluxMapStyleDataset``: object ``i`` of its sorted listing is file ``i``."""

    def __init__(self, ds: Dataset, config: DataConfig) -> None:
        bucket, prefix = _split_gs(ds.data_prefix)
        self.ds = ds
        self.inner = dataflux_datasets.map_dataset(
            config.project, bucket, prefix, config.dataflux_compose
        )
        self.names = [n for n, _ in dataflux_datasets.listed(self.inner)]

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i: int) -> Item:
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Item]:
        out: list[Item] = []
        for i, data in zip(indices, dataflux_datasets.fetch(self.inner, indices), strict=True):
            out.extend(_items(self.ds, self.names[i], data))
        return out


class DatafluxStream(tud.IterableDataset[Item]):
    """``DataFluxIterableDataset`` narrowed to an accelerator's files; its workers share them."""

    def __init__(self, ds: Dataset, config: DataConfig, accelerator: int) -> None:
        bucket, prefix = _split_gs(ds.data_prefix)
        self.ds, self.config, self.accelerator = ds, config, accelerator
        self.inner = dataflux_datasets.iterable_dataset(
            config.project, bucket, prefix, config.dataflux_compose
        )
        self.all = dataflux_datasets.listed(self.inner)
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        mine = files_of(
            self.ds,
            self.accelerator,
            self.config.accelerators,
            epoch,
            self.config.shuffle,
            self.ds.seed,
        )
        dataflux_datasets.narrow(self.inner, [self.all[f] for f in mine])

    def __iter__(self) -> Iterator[Item]:
        # The library yields bytes alone: which file each came from is not said, so the items
        # carry no index asked for; each sample still carries and is checked against its own.
        for data in self.inner:
            for sample in content.decode_file(self.ds.format, bytes(data), self.ds.sample_bytes):
                yield Item(sample, asked=None)


def _s3_options(config: DataConfig) -> dict[str, Any]:
    from s3torchconnector import S3ClientConfig, S3ReaderConstructor

    where = session.prepare_s3(config)
    reader = (
        S3ReaderConstructor.range_based()
        if config.s3_reader is S3Reader.RANGED
        else S3ReaderConstructor.sequential()
    )
    return {
        "region": where.region,
        "endpoint": where.endpoint,
        "s3client_config": S3ClientConfig(force_path_style=where.path_style),
        "reader_constructor": reader,
    }


class ReadS3:
    """The s3 datasets' transform: an object's key and bytes. The CRT client fails a read at once
    on a 429 whose code is not SlowDown (storage/s3/throttling.py); the object is then read again,
    under the retry policy, as the checkpoint backend does. A 429 comes before any byte, and the
    library's readers send their GET again on the next read (measured for sequential and ranged:
    tests/test_data_run.py). Pickled into the loader's workers: a plain label, nothing else."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __call__(self, reader: Any) -> tuple[str, bytes]:
        def read() -> bytes:
            return bytes(reader.read())

        what = f"{self.label}read of s3://{reader.bucket}/{reader.key}"
        return str(reader.key), attempt(read, what, throttled)


class S3Samples(tud.Dataset[Item]):
    """``S3MapDataset.from_prefix``: its objects in key order, object ``i`` is file ``i``."""

    def __init__(self, ds: Dataset, config: DataConfig) -> None:
        from s3torchconnector import S3MapDataset

        self.ds = ds
        options = _s3_options(config)
        self.inner = S3MapDataset.from_prefix(
            ds.data_prefix, transform=ReadS3(f"[rank {config.rank}] "), **options
        )
        self.count = len(self.inner)  # lists the prefix now, inside the timed listing

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> Item:
        name, data = self.inner[i]
        return next(_items(self.ds, name, data))


class S3Stream(tud.IterableDataset[Item]):
    """``S3IterableDataset.from_objects`` over an accelerator's files, sharded over its loader's
    workers by the library (``enable_sharding``; no process group, so not over ranks)."""

    def __init__(self, ds: Dataset, config: DataConfig, accelerator: int) -> None:
        self.ds, self.config, self.accelerator = ds, config, accelerator
        self.options = _s3_options(config)
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        from s3torchconnector import S3IterableDataset

        mine = files_of(
            self.ds,
            self.accelerator,
            self.config.accelerators,
            epoch,
            self.config.shuffle,
            self.ds.seed,
        )
        self.inner = S3IterableDataset.from_objects(
            [self.ds.file_path(f) for f in mine],
            transform=ReadS3(f"[rank {self.config.rank}] "),
            enable_sharding=True,
            **self.options,
        )

    def __iter__(self) -> Iterator[Item]:
        for name, data in self.inner:
            yield from _items(self.ds, name, data)
