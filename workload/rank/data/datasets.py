"""ckptbench's own torch datasets over a reader's client (readers gcs, gcsfs, s3fs, file): the
map-style one of samples (sharding sample) and the iterable one of files (sharding file).

Each request is one read through the :class:`~.store.Store` (whole object, or the sample's range
of a raw file holding several), so the requests a rank made are counted exactly.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import torch.utils.data as tud

from ckptbench.workload.contract.data.choices import DataFormat
from ckptbench.workload.contract.data.layout import Dataset
from ckptbench.workload.rank.data import content
from ckptbench.workload.rank.data.batches import Item
from ckptbench.workload.rank.data.store import Store


class SampleMap(tud.Dataset[Item]):
    """Sample ``i`` of the dataset: one request for it."""

    def __init__(self, ds: Dataset, store: Store) -> None:
        self.ds, self.store = ds, store

    def __len__(self) -> int:
        return self.ds.total_samples

    def __getitem__(self, i: int) -> Item:
        spf, size = self.ds.samples_per_file, self.ds.sample_bytes
        path = self.ds.file_path(i // spf)
        if spf == 1:
            (sample,) = content.decode_file(self.ds.format, self.store.read(path), size)
        else:  # raw only (the settings' rules): the sample's bytes, by range
            assert self.ds.format is DataFormat.RAW
            sample = content.split(self.store.read(path, (i % spf) * size, size))
        return Item(sample, asked=i, fetches=1, retries=self.store.retries.drain())


def files_of(
    ds: Dataset, accelerator: int, accelerators: int, epoch: int, shuffle: bool, seed: int
) -> list[int]:
    """The files an accelerator reads in an epoch: every accelerator-th of the dataset's files,
    in an order shuffled from the seed and the epoch (the same order on every rank)."""
    order = list(range(ds.files))
    if shuffle:
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order[accelerator::accelerators]


class FileStream(tud.IterableDataset[Item]):
    """An accelerator's files, dealt to its loader's workers, each read whole and its samples
    yielded in order."""

    def __init__(
        self, ds: Dataset, store: Store, accelerator: int, accelerators: int, shuffle: bool
    ) -> None:
        self.ds, self.store = ds, store
        self.accelerator, self.accelerators, self.shuffle = accelerator, accelerators, shuffle
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[Item]:
        mine = files_of(
            self.ds, self.accelerator, self.accelerators, self.epoch, self.shuffle, self.ds.seed
        )
        worker = tud.get_worker_info()
        if worker is not None:
            mine = mine[worker.id :: worker.num_workers]
        spf = self.ds.samples_per_file
        for f in mine:
            data = self.store.read(self.ds.file_path(f))
            first = True
            for k, sample in enumerate(
                content.decode_file(self.ds.format, data, self.ds.sample_bytes)
            ):
                yield Item(
                    sample,
                    asked=f * spf + k,
                    fetches=1 if first else 0,
                    retries=self.store.retries.drain() if first else {},
                )
                first = False
