"""What a data-loading rank holds at its peak, planned before anything starts, so a run that
cannot fit is refused by name (docs/data-loading.md#memory).

Per accelerator: every batch in flight (each worker's ``prefetchFactor`` batches, and the one being
checked and computed), each held twice at its peak (the samples a worker decoded and the batch
tensor they are stacked into, in shared memory); each worker's file being decoded (a whole file
with sharding file, one sample otherwise), twice (the bytes read and the samples cut from them);
and each worker process's own memory. The rank's own interpreter and torch come once.
"""

from __future__ import annotations

from dataclasses import dataclass

from ckptbench.workload.contract.checkpoint.sizes import format_bytes
from ckptbench.workload.contract.data.choices import Sharding
from ckptbench.workload.contract.data.settings import DataSettings, LoaderSettings

MIB = 1024**2
# Measured: a rank with torch and the storage clients imported (bench/bench_data.py prints it).
RANK_BASE_BYTES = 400 * MIB
# A forked DataLoader worker's own pages once it has run (copy-on-write touched by Python).
WORKER_BASE_BYTES = 60 * MIB


@dataclass(frozen=True)
class DataMemory:
    batches_in_flight: int
    batch_bytes: int
    file_bytes: int
    workers: int
    total_bytes: int


def _in_flight(s: LoaderSettings) -> int:
    workers = s.resolved_workers
    return workers * s.prefetch_factor + 1 if workers > 0 else 1


def loader_bytes(s: LoaderSettings) -> int:
    """What one accelerator's loader holds at its peak (its batches, files and workers): a data
    rank holds one per accelerator, a checkpoint rank whose step reads from the loader one."""
    workers = s.resolved_workers
    batch = s.resolved_batch_size * s.resolved_sample_bytes
    unit = s.file_bytes if s.sharding is Sharding.FILE else s.resolved_sample_bytes
    readers = max(1, workers)
    return 2 * _in_flight(s) * batch + 2 * readers * unit + workers * WORKER_BASE_BYTES


def estimate(s: DataSettings) -> DataMemory:
    return DataMemory(
        batches_in_flight=_in_flight(s),
        batch_bytes=s.resolved_batch_size * s.resolved_sample_bytes,
        file_bytes=s.file_bytes if s.sharding is Sharding.FILE else s.resolved_sample_bytes,
        workers=s.resolved_workers * s.accelerators_per_rank,
        total_bytes=RANK_BASE_BYTES + s.accelerators_per_rank * loader_bytes(s),
    )


def refusal(s: DataSettings, limit: int | None, available: int | None) -> str | None:
    """Why a rank of ``s`` cannot fit under ``limit`` (its memory limit) or in ``available``
    memory, or None when it fits."""
    plan = estimate(s)
    for budget, what in ((limit, "the memory limit"), (available, "the memory available")):
        if budget is not None and plan.total_bytes > budget:
            return (
                f"a rank would hold about {format_bytes(plan.total_bytes)} "
                f"({plan.batches_in_flight} batch(es) of {format_bytes(plan.batch_bytes)} in "
                f"flight per accelerator, {plan.workers} worker(s)), more than {what} "
                f"({format_bytes(budget)}); lower --batch-size, --workers or --prefetch"
            )
    return None
