"""The data procedure on one rank: prepare the dataset (or find it), build each accelerator's
dataset (the libraries list the prefix then: timed), meet the other ranks, run every accelerator
at once, and report (docs/data-loading.md#the-procedure)."""

from __future__ import annotations

import resource
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch.utils.data as tud

from ckptbench.workload.contract.data import waits
from ckptbench.workload.contract.data.choices import Reader, Sharding
from ckptbench.workload.contract.data.config import DataConfig
from ckptbench.workload.contract.data.results import DataRankResult
from ckptbench.workload.rank.data import accelerator
from ckptbench.workload.rank.data.batches import Item
from ckptbench.workload.rank.data.datasets import FileStream, SampleMap
from ckptbench.workload.rank.data.library_datasets import (
    DatafluxSamples,
    DatafluxStream,
    S3Samples,
    S3Stream,
)
from ckptbench.workload.rank.data.meeting import Meeting
from ckptbench.workload.rank.data.prepare import prepare
from ckptbench.workload.rank.data.store import Store

ROUND = 6


def plan_of(config: DataConfig) -> accelerator.Plan:
    return accelerator.Plan(
        epochs=config.resolved_epochs,
        batch_size=config.resolved_batch_size,
        workers=config.resolved_workers,
        prefetch_factor=config.prefetch_factor,
        compute_seconds=config.resolved_compute_seconds,
        verify=config.verify,
        format=config.resolved_format,
        sample_bytes=config.resolved_sample_bytes,
    )


def dataset_for(config: DataConfig, store: Store, g: int) -> tud.Dataset[Item]:
    """Global accelerator ``g``'s dataset, by reader and sharding."""
    ds = config.dataset
    by_file = config.sharding is Sharding.FILE
    if config.backend is Reader.DATAFLUX:
        return DatafluxStream(ds, config, g) if by_file else DatafluxSamples(ds, config)
    if config.backend is Reader.S3:
        return S3Stream(ds, config, g) if by_file else S3Samples(ds, config)
    return (
        FileStream(ds, store, g, config.accelerators, config.shuffle)
        if by_file
        else (SampleMap(ds, store))
    )


def loader_of(
    config: DataConfig, dataset: tud.Dataset[Item], g: int
) -> Callable[[int], tud.DataLoader[Item]]:
    plan = plan_of(config)
    sampler: tud.DistributedSampler[int] | None = None
    if config.sharding is Sharding.SAMPLE:
        sampler = tud.DistributedSampler(
            dataset,
            num_replicas=config.accelerators,
            rank=g,
            shuffle=config.shuffle,
            seed=config.seed,
        )
    loader = accelerator.loader(dataset, plan, sampler)

    def for_epoch(epoch: int) -> tud.DataLoader[Item]:
        if sampler is not None:
            sampler.set_epoch(epoch)
        else:
            dataset.set_epoch(epoch)  # type: ignore[attr-defined]
        return loader

    return for_epoch


def run(
    config: DataConfig, log: Callable[[str], None], stop: threading.Event
) -> tuple[DataRankResult, list[DataRankResult]]:
    """This rank's result, and on rank 0 every rank's (gathered on its store; [] elsewhere)."""
    store = Store(config)
    meeting = Meeting(config, log)
    prepared = prepare(config, store, meeting)
    if config.rank == 0:
        log(
            "dataset "
            + ("written" if prepared is not None else "found")
            + f": {config.dataset.path}"
        )
    first = config.rank * config.accelerators_per_rank
    accelerators = range(first, first + config.accelerators_per_rank)
    t0 = time.perf_counter()
    datasets = [dataset_for(config, store, g) for g in accelerators]
    listing = time.perf_counter() - t0 if config.backend.is_library_dataset else None
    loaders = [loader_of(config, d, g) for d, g in zip(datasets, accelerators, strict=True)]
    meeting.barrier("start")
    plan = plan_of(config)

    def said(epoch: int, fig: accelerator.Figures) -> None:
        # The local runner counts these lines for its ETA (local/outputs/progress.py, EPOCH_DONE).
        log(
            f"epoch {epoch + 1}/{plan.epochs}: {fig.epoch_samples[-1]} samples in "
            f"{fig.epoch_seconds[-1]:.3f} s (first accelerator)"
        )

    def one(k: int) -> accelerator.Figures:
        tell = said if config.rank == 0 and k == 0 else None
        return accelerator.run(loaders[k], plan, stop, on_epoch=tell)

    with ThreadPoolExecutor(len(loaders), thread_name_prefix="accelerator") as pool:
        figures = list(pool.map(one, range(len(loaders))))
    mine = _result(config, figures, prepared, listing, store)
    everyone = meeting.gather("result", mine.to_message())
    return mine, [DataRankResult.from_message(text) for text in everyone]


def _result(
    config: DataConfig,
    figures: list[accelerator.Figures],
    prepared: float | None,
    listing: float | None,
    store: Store,
) -> DataRankResult:
    retries: dict[str, int] = dict(store.retries.drain())
    for f in figures:
        for cause, n in f.retries.items():
            retries[cause] = retries.get(cause, 0) + n
    epochs = max(len(f.epoch_seconds) for f in figures)
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    fields: dict[str, Any] = {
        "rank": config.rank,
        "host": socket.gethostname(),
        "accelerators": len(figures),
        "samples": sum(f.samples for f in figures),
        "bytes": sum(f.bytes for f in figures),
        "batches": sum(f.batches for f in figures),
        "verified_bytes": sum(f.verified_bytes for f in figures),
        "compute_seconds": round(sum(f.compute_seconds for f in figures), ROUND),
        "loop_seconds": round(sum(f.loop_seconds for f in figures), ROUND),
        "verify_seconds": round(sum(f.verify_seconds for f in figures), ROUND),
        "au": [round(f.utilization, ROUND) for f in figures],
        "first_batch_seconds": max(
            (f.first_batch_seconds for f in figures if f.first_batch_seconds is not None),
            default=None,
        ),
        "epoch_seconds": [
            round(max(f.epoch_seconds[e] for f in figures if len(f.epoch_seconds) > e), ROUND)
            for e in range(epochs)
        ],
        "epoch_samples": [
            sum(f.epoch_samples[e] for f in figures if len(f.epoch_samples) > e)
            for e in range(epochs)
        ],
        "wait_histogram": waits.histogram(w for f in figures for w in f.waits),
        "listing_seconds": None if listing is None else round(listing, ROUND),
        "prepare_seconds": None if prepared is None else round(prepared, ROUND),
        "requests": None if config.backend.is_library_dataset else sum(f.fetches for f in figures),
        "retries": retries,
        "worker_peak_rss_bytes": children if config.resolved_workers > 0 else None,
    }
    return DataRankResult(**fields)
