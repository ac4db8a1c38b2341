"""What the figures read of each rank: one small record per rank, made once from its result.

:func:`~ckptbench.workload.contract.results.figures.summarize_records` computes every figure over
these records, and :func:`~ckptbench.workload.contract.results.figures.summarize` over a run's
results makes them first, so the local runner, the rank and the operator share one path. A parsed
:class:`RankResult` is some thirty pydantic objects, ~27 KB for a rank with 8 samples, most of it
per-sample lists no figure reads across ranks (I/O, planning, finish and stall samples); its
record keeps what the figures read, ~2 KB. The operator makes a rank's record once, when it first
reads the rank's termination message, and keeps it across reconciles
(:mod:`ckptbench.operator.status.pods`): at 100,000 ranks a reconcile walks small tuples instead
of parsing 360 MB of messages again.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Literal, NamedTuple

from ckptbench.workload.contract.choices import CacheMode, Procedure
from ckptbench.workload.contract.results.rank import (
    BothTiming,
    Leftovers,
    OpStats,
    OpTiming,
    RankResources,
    RankResult,
    RunSamples,
    TrainTiming,
)

Operation = Literal["save", "load", "delete"]


class StatsRow(NamedTuple):
    """:class:`OpStats` as a tuple: a tenth of the memory of the pydantic object, kept per rank."""

    n: int
    mean: float
    stdev: float
    p50: float
    p90: float
    max: float
    min: float
    p99: float | None

    @classmethod
    def of(cls, s: OpStats) -> StatsRow:
        return cls(s.n, s.mean, s.stdev, s.p50, s.p90, s.max, s.min, s.p99)

    def stats(self) -> OpStats:
        return OpStats.model_validate(self._asdict())


def _row(s: OpStats | None) -> StatsRow | None:
    return StatsRow.of(s) if s is not None else None


def _samples(xs: list[float] | None) -> array[float] | None:
    # 8 bytes a sample, in one block: a list holds a 24-byte float object and a pointer each.
    return array("d", xs) if xs is not None else None


class OpRecord(NamedTuple):
    """One rank's timing of one operation, as the figures read it: :class:`OpTiming`'s
    statistics and the per-sample lists that are compared across ranks (the collective's
    durations and the wall-clock starts and ends of the span)."""

    stats: StatsRow  # barrier to barrier
    io_mean: float
    planning_mean: float
    gc_mean: float | None  # None: no automatic collection ran inside the operation
    blocked: StatsRow | None
    staging: StatsRow | None
    background: StatsRow | None
    seconds: array[float] | None
    started_at: array[float] | None
    ended_at: array[float] | None
    read_bytes: int | None
    needed_bytes: int | None
    finish_mean: float | None  # None: finish took no time on this rank (not the coordinator)

    @classmethod
    def of(cls, t: OpTiming) -> OpRecord:
        return cls(
            StatsRow.of(t.stats),
            t.io.mean,
            t.planning.mean,
            t.gc.mean if t.gc is not None else None,
            _row(t.blocked),
            _row(t.staging),
            _row(t.background),
            _samples(t.seconds),
            _samples(t.started_at),
            _samples(t.ended_at),
            t.read_bytes,
            t.needed_bytes,
            t.finish.mean if t.finish is not None else None,
        )


class ResourceRow(NamedTuple):
    """:class:`RankResources` as a tuple, its fields by the same names."""

    cpu_user_seconds: float
    cpu_system_seconds: float
    peak_rss_bytes: int | None
    sent_bytes: int
    received_bytes: int
    node_memory_bytes: int | None

    @classmethod
    def of(cls, x: RankResources) -> ResourceRow:
        return cls(
            x.cpu_user_seconds,
            x.cpu_system_seconds,
            x.peak_rss_bytes,
            x.sent_bytes,
            x.received_bytes,
            x.node_memory_bytes,
        )

    def resources(self) -> RankResources:
        return RankResources.model_validate(self._asdict())


class RankOp(NamedTuple):
    """One rank's timing of one operation and the tensor bytes it moved in it."""

    rank: int
    bytes: int
    timing: OpRecord


class RankRecord(NamedTuple):
    """What the figures read of one rank's :class:`RankResult`; ``save``, ``load`` and
    ``delete`` are its operations with the bytes it moved in each (None: not timed)."""

    rank: int
    host: str
    bytes: int
    load_bytes: int | None
    save: RankOp | None
    load: RankOp | None
    delete: RankOp | None
    train: TrainTiming | None
    resources: ResourceRow | None
    checkpointer_peak_rss_bytes: int | None
    verified: bool | None
    error: str | None
    procedure: Procedure
    cache: CacheMode | None
    both: BothTiming | None = None
    left: Leftovers | None = None
    run: RunSamples | None = None  # rank 0's reduction of every rank's per-sample lists


def moved_bytes(result: RankResult | RankRecord, op: Operation) -> int:
    """Tensor bytes the rank moved: its shard on save (and delete); on load, what its load
    template held."""
    if op == "load" and result.load_bytes is not None:
        return result.load_bytes
    return result.bytes


def rank_ops(records: Sequence[RankRecord], op: Operation) -> list[RankOp]:
    """``(rank, bytes moved, timing)`` of each rank that timed ``op``, in the order given."""
    return [timed for r in records if (timed := getattr(r, op)) is not None]


def record_of(result: RankResult) -> RankRecord:
    """The record of one rank's result."""

    def op(name: Operation) -> RankOp | None:
        timing: OpTiming | None = getattr(result, name)
        if timing is None:
            return None
        return RankOp(result.rank, moved_bytes(result, name), OpRecord.of(timing))

    return RankRecord(
        rank=result.rank,
        host=result.host,
        bytes=result.bytes,
        load_bytes=result.load_bytes,
        save=op("save"),
        load=op("load"),
        delete=op("delete"),
        train=result.train,
        both=result.both,
        resources=ResourceRow.of(result.resources) if result.resources is not None else None,
        checkpointer_peak_rss_bytes=result.checkpointer_peak_rss_bytes,
        verified=result.verified,
        error=result.error,
        procedure=result.procedure,
        cache=result.cache,
        left=result.left,
        run=result.run,
    )


class OpColumns(NamedTuple):
    """One operation across the ranks that timed it, a column per field, in the ranks' order:
    the figures over ranks are ``max``, ``min``, ``sum`` and ``zip`` over these, which run in
    C, where a loop over 100,000 records in Python took seconds."""

    ranks: tuple[int, ...]
    bytes: tuple[int, ...]
    stats: tuple[StatsRow, ...]
    io_mean: tuple[float, ...]
    planning_mean: tuple[float, ...]
    gc_mean: tuple[float | None, ...]
    blocked: tuple[StatsRow | None, ...]
    staging: tuple[StatsRow | None, ...]
    background: tuple[StatsRow | None, ...]
    seconds: tuple[array[float] | None, ...]
    started_at: tuple[array[float] | None, ...]
    ended_at: tuple[array[float] | None, ...]
    read_bytes: tuple[int | None, ...]
    needed_bytes: tuple[int | None, ...]
    finish_mean: tuple[float | None, ...]


def columns(timings: Sequence[RankOp]) -> OpColumns:
    """The columns of ``timings`` (not empty): two transpositions, both in C."""
    ranks, moved, records = zip(*timings, strict=True)
    return OpColumns(ranks, moved, *zip(*records, strict=True))
