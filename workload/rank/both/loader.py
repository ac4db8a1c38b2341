"""Both demands at once on a checkpoint rank: its training step takes its batch from a data loader
(``data_loading`` set) reading a dataset under the checkpoint's storage root, made or found as
``ckptbench data`` makes it, through the data side's own readers and datasets.

The rank has one emulated accelerator: its loader is the data side's (``procedure.loader_of``), as
accelerator ``rank`` of ``world_size``; each step asks it for a batch, checks the batch (timed
apart, not training's) and spends the loader's compute time per batch. The windows that
interleave saves and reads are :mod:`ckptbench.workload.rank.both.windows`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch.distributed as dist
import torch.utils.data as tud

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.data.config import DataConfig
from ckptbench.workload.rank.both.windows import Save
from ckptbench.workload.rank.data import accelerator
from ckptbench.workload.rank.data.batches import Batch, Item
from ckptbench.workload.rank.data.prepare import prepare
from ckptbench.workload.rank.data.procedure import dataset_for, loader_of, plan_of
from ckptbench.workload.rank.data.store import Store


def data_config(config: WorkloadConfig) -> DataConfig:
    """The data side's config of a checkpoint rank's loader: its group's settings, one
    accelerator per rank, the dataset under the checkpoint's storage root, the rank's seed and
    storage service."""
    assert config.data_loading is not None
    return DataConfig(
        **config.data_loading.model_dump(),
        data_path=config.checkpoint_path,
        seed=config.seed,
        world_size=config.world_size,
        rank=config.rank,
        accelerators_per_rank=1,
        epochs=1,  # one pass at a time: the loader starts the next epoch when one ends
        project=config.project,
        s3_endpoint=config.s3_endpoint,
        s3_region=config.s3_region,
        s3_path_style=config.s3_path_style,
        run_id=config.run_id,
        termination_log=None,
    )


class GroupMeeting:
    """``prepare``'s meeting points on the checkpoint ranks' process group (none: one rank)."""

    def __init__(self, rank: int, ranks: int, distributed: bool) -> None:
        self.rank, self.ranks, self.distributed = rank, ranks, distributed
        self._published: dict[str, object] = {}

    def barrier(self, name: str) -> None:
        if self.distributed:
            dist.barrier()

    def publish(self, key: str, value: object) -> None:
        self._published[key] = value

    def read(self, key: str) -> Any:
        """What rank 0 published under ``key`` (every rank calls this, as a broadcast)."""
        box = [self._published.get(key)]
        if self.distributed:
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, name: str, value: object) -> list[Any]:
        if not self.distributed:
            return [value]
        out: list[Any] | None = [None] * self.ranks if self.rank == 0 else None
        dist.gather_object(value, out, dst=0)
        return out or []


class LoaderSide:
    """The loader and the accelerator of a checkpoint rank's training step (a
    :class:`~ckptbench.workload.rank.both.windows.Side` with the loop's meet and save)."""

    def __init__(
        self,
        config: WorkloadConfig,
        meet: Callable[[], None],
        start_save: Callable[[], Save],
        distributed: bool,
    ) -> None:
        self.data = data_config(config)
        self.plan = plan_of(self.data)
        self.meet = meet
        self.start_save = start_save
        store = Store(self.data)
        prepare(self.data, store, GroupMeeting(config.rank, config.world_size, distributed))
        dataset = dataset_for(self.data, store, config.rank)
        self._for_epoch: Callable[[int], tud.DataLoader[Item]] = loader_of(
            self.data, dataset, config.rank
        )
        self._epoch = 0
        self._batches: Iterator[Batch] | None = None

    def clock(self) -> float:
        return time.perf_counter()

    @property
    def compute_seconds(self) -> float:
        return self.plan.compute_seconds

    @property
    def reading(self) -> bool:
        """Whether the loader is open: its workers may be reading."""
        return self._batches is not None

    def open_loader(self) -> None:
        self._batches = iter(self._for_epoch(self._epoch))

    def close_loader(self) -> None:
        # The iterator is the workers' only owner: dropping it shuts them down (DataLoader's
        # iterator stops its workers as it is collected), so a closed loader reads nothing.
        self._batches = None

    def batch(self) -> tuple[int, float]:
        assert self._batches is not None, "the loader is closed"
        try:
            batch = next(self._batches)
        except StopIteration:  # the epoch is over: the next one, as training goes on
            self._epoch += 1
            self.open_loader()
            assert self._batches is not None
            batch = next(self._batches)
        checking = 0.0
        if self.plan.verify:
            c0 = time.perf_counter()
            accelerator.check(batch, self.plan.format, self.plan.sample_bytes)
            checking = time.perf_counter() - c0
        return len(batch), checking

    def idle(self, seconds: float) -> None:
        time.sleep(seconds)

    def compute(self) -> float:
        t0 = time.perf_counter()
        if self.plan.compute_seconds > 0:
            time.sleep(self.plan.compute_seconds)
        return time.perf_counter() - t0
