"""One emulated accelerator: a DataLoader over its share of the dataset, each batch waited for,
checked, then "computed" (the accelerator is busy for the compute time, touching nothing), as
MLPerf Storage's DLIO emulates training (docs/data-loading.md#the-procedure).

Timed per batch: the wait (asking the loader for the next batch until it is handed over), the
compute (the time the accelerator was busy), and the check of every sample, which is ckptbench's
and not training's: it is timed apart and kept out of the loop's time, so utilisation is
compute / (waits + compute). While a batch is checked the loader's workers go on fetching. An
epoch runs from asking its loader for its batches (which starts its workers) to its last batch
computed; its first wait, the workers starting and the first fetches, is also reported alone as
the time to first batch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import google_crc32c
import torch.utils.data as tud

from ckptbench.workload.contract.data.choices import DataFormat
from ckptbench.workload.rank.data import content
from ckptbench.workload.rank.data.batches import Batch, Item, collate
from ckptbench.workload.rank.data.content import SampleError


@dataclass
class Figures:
    """What one accelerator measured."""

    samples: int = 0
    bytes: int = 0
    batches: int = 0
    verified_bytes: int = 0
    compute_seconds: float = 0.0
    verify_seconds: float = 0.0
    waits: list[float] = field(default_factory=list)
    epoch_seconds: list[float] = field(default_factory=list)
    epoch_samples: list[int] = field(default_factory=list)
    first_batch_seconds: float | None = None
    fetches: int = 0
    retries: dict[str, int] = field(default_factory=dict)

    @property
    def loop_seconds(self) -> float:
        return sum(self.epoch_seconds)

    @property
    def utilization(self) -> float:
        loop = self.loop_seconds
        return self.compute_seconds / loop if loop > 0 else 0.0


@dataclass(frozen=True)
class Plan:
    """How an accelerator runs: what is fixed before its first batch."""

    epochs: int
    batch_size: int
    workers: int
    prefetch_factor: int
    compute_seconds: float
    verify: bool
    format: DataFormat
    sample_bytes: int


def loader(
    dataset: tud.Dataset[Item], plan: Plan, sampler: tud.Sampler[int] | None
) -> tud.DataLoader[Item]:
    return tud.DataLoader(
        dataset,
        batch_size=plan.batch_size,
        sampler=sampler,
        num_workers=plan.workers,
        prefetch_factor=plan.prefetch_factor if plan.workers > 0 else None,
        collate_fn=collate,
        # fork, as a DataLoader does by default on Linux: the workers start without importing
        # torch again, and each makes its own storage client on first use (store.Store).
        multiprocessing_context="fork" if plan.workers > 0 else None,
    )


def check(batch: Batch, fmt: DataFormat, sample_bytes: int) -> None:
    """Raise :class:`SampleError`, naming the sample, unless every sample of ``batch`` is the one
    asked for (where the dataset says) and its bytes match its checksum."""
    if batch.data.shape[1] != sample_bytes:
        raise SampleError(f"samples of {batch.data.shape[1]} bytes, expected {sample_bytes}")
    rows = batch.data.numpy()
    for k in range(len(batch)):
        index, asked = int(batch.index[k]), int(batch.asked[k])
        if asked >= 0 and index != asked:
            raise SampleError(f"sample {index} handed over where sample {asked} was asked for")
        row = rows[k]
        found = google_crc32c.value(row) if fmt is DataFormat.PARQUET else content.checksum(row)
        if found != int(batch.crc32c[k]):
            raise SampleError(f"sample {index}: its bytes do not match its crc32c (corrupted)")


def run(
    make_loader: Callable[[int], tud.DataLoader[Item]],
    plan: Plan,
    stop: threading.Event,
    busy: Callable[[float], None] = time.sleep,
    on_epoch: Callable[[int, Figures], None] | None = None,
) -> Figures:
    """Every epoch of one accelerator; ``make_loader(epoch)`` gives the epoch's loader (its
    sampler or dataset set to the epoch). ``busy`` is the accelerator computing; ``on_epoch``
    hears of each epoch's end."""
    fig = Figures()
    for epoch in range(plan.epochs):
        loader = make_loader(epoch)
        start = time.perf_counter()
        it = iter(loader)  # starts the epoch's workers: part of its first wait, as in training
        checking = 0.0
        samples = 0
        first = True
        while not stop.is_set():
            t0 = start if first else time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            wait = time.perf_counter() - t0
            fig.waits.append(wait)
            if first:
                fig.first_batch_seconds = max(fig.first_batch_seconds or 0.0, wait)
                first = False
            if plan.verify:
                c0 = time.perf_counter()
                check(batch, plan.format, plan.sample_bytes)
                checking += time.perf_counter() - c0
                fig.verified_bytes += batch.nbytes
            if plan.compute_seconds > 0:
                b0 = time.perf_counter()
                busy(plan.compute_seconds)
                fig.compute_seconds += time.perf_counter() - b0
            fig.batches += 1
            samples += len(batch)
            fig.bytes += batch.nbytes
            fig.fetches += batch.fetches
            for cause, n in batch.retries.items():
                fig.retries[cause] = fig.retries.get(cause, 0) + n
        fig.samples += samples
        fig.verify_seconds += checking
        fig.epoch_seconds.append(time.perf_counter() - start - checking)
        fig.epoch_samples.append(samples)
        if on_epoch is not None:
            on_epoch(epoch, fig)
    return fig
