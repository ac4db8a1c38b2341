"""What a DataLoader hands the emulated accelerator: a batch of samples as tensors (so that, as in
training, they reach the rank through shared memory, not a pipe), with what each sample claims to
be and what fetching it cost."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ckptbench.workload.rank.data.content import Sample


@dataclass
class Item:
    """One sample as a dataset returns it, with the index it was asked for (None: the dataset
    cannot say) and what its fetch cost (requests made, failed attempts by cause)."""

    sample: Sample
    asked: int | None
    fetches: int = 0
    retries: dict[str, int] = field(default_factory=dict)


@dataclass
class Batch:
    data: torch.Tensor  # (samples, bytes) uint8
    index: torch.Tensor  # (samples,) int64: the index each sample carries
    crc32c: torch.Tensor  # (samples,) int64: the checksum each sample carries
    asked: torch.Tensor  # (samples,) int64: the index asked for; -1 where unknown
    fetches: int
    retries: dict[str, int]

    def __len__(self) -> int:
        return int(self.index.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.data.numel())


def collate(items: Sequence[Item]) -> Batch:
    retries: Counter[str] = Counter()
    for it in items:
        retries.update(it.retries)
    rows = np.stack([np.frombuffer(it.sample.data, dtype=np.uint8) for it in items])
    return Batch(
        data=torch.from_numpy(rows),
        index=torch.tensor([it.sample.index for it in items], dtype=torch.int64),
        crc32c=torch.tensor([it.sample.crc32c for it in items], dtype=torch.int64),
        asked=torch.tensor([-1 if it.asked is None else it.asked for it in items]),
        fetches=sum(it.fetches for it in items),
        retries=dict(retries),
    )
