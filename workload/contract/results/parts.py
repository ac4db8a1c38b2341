"""The ranks' records reduced part by part, for the figures over ranks.

A run's ranks are cut into parts of :data:`PART_RANKS` consecutive ranks (:func:`cut`); each part
is reduced to what the figures read of it (:func:`part_of`, a :class:`Part`), and the parts are
combined in rank order (:func:`combine`). Every reduction is a max, a min, a sum, a per-sample max
or min, or a concatenation in rank order, so the combined part is the same however the ranks are
cut, and :func:`~ckptbench.workload.contract.results.figures.summarize_records` finishes the
figures from it. The operator keeps each part's reduction while its ranks' results stay the same
(:mod:`ckptbench.operator.status.memo`): when one result arrives among 100,000 ranks, one part is
reduced again, not the run.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from itertools import chain, compress
from typing import NamedTuple

from ckptbench.workload.contract.results import stats
from ckptbench.workload.contract.results.records import (
    RankOp,
    RankRecord,
    StatsRow,
    columns,
    rank_ops,
)
from ckptbench.workload.contract.results.summaries import RANKS_LISTED

PART_RANKS = 1024

Ranked = list[tuple[int, StatsRow]]  # (rank, statistics) of each rank that timed a figure


class OpPart(NamedTuple):
    """One operation over a part's ranks that timed it. "Ranked" ranks are those that moved
    bytes, or all of them when none did (docs/measurement.md: a rank outside a resharding load's
    world has no throughput to rank)."""

    timed: int
    moving: int  # timed ranks that moved bytes
    seconds: list[float] | None  # per sample, the max over ranks; None: some rank lacks samples
    worst: StatsRow  # the first largest mean of the barrier-to-barrier statistics
    starts: list[float] | None  # per sample, the earliest start; None: some rank lacks them
    ends: list[float] | None  # per sample, the latest end
    slowest: tuple[float, int]  # max of (mean I/O seconds, -rank) over the ranked ranks
    fastest: float  # least mean I/O seconds of a ranked rank
    rates: list[float]  # each ranked rank's throughput, in rank order
    own: float  # largest planning plus I/O mean
    planning: float  # largest planning mean
    gc: float | None  # largest garbage collection mean; None: none ran
    rank0: StatsRow | None  # rank 0's barrier-to-barrier statistics, when in the part
    io: list[float] | None  # each rank's mean I/O seconds, in order, while RANKS_LISTED or fewer
    blocked: Ranked
    staging: Ranked
    background: Ranked
    counted: int  # ranks whose load read and needed bytes were counted
    read_bytes: int
    needed_bytes: int
    read_ratio: float  # largest per-rank read / needed (0 when none counted)
    finish: float | None  # largest finish mean (the coordinator's); None: no rank's took time


class ResourcePart(NamedTuple):
    ranks: int
    cpu_user: float
    cpu_system: float
    peak_rss: int | None
    sent_max: int
    received_max: int
    sent: int
    received: int


class Part(NamedTuple):
    save: OpPart | None
    load: OpPart | None
    delete: OpPart | None
    resources: ResourcePart | None
    slowest: tuple[float, int] | None  # max of (save plus load mean I/O seconds, -rank)


def rank_throughput(moved: int, io_mean: float) -> float:
    """The rank's bytes / its mean I/O seconds (MLPerf Storage's per-process figure)."""
    return stats.throughput(moved, io_mean)


def per_sample_max(series: Sequence[Sequence[float] | None]) -> list[float] | None:
    """Per sample, the largest over the series; None when some series has no samples."""
    if not series or not all(series):
        return None
    return stats.elementwise_max([s or [] for s in series])


def per_sample_min(series: Sequence[Sequence[float] | None]) -> list[float] | None:
    """Per sample, the least over the series; None when some series has no samples."""
    if not series or not all(series):
        return None
    # zip stops at the shortest series, as for the maxima.
    return [min(column) for column in zip(*(s or [] for s in series), strict=False)]


def op_part(timings: Sequence[RankOp]) -> OpPart | None:
    """One operation over ``timings``, one rank's each (None when empty). Every figure is a
    max, min or sort over a column, in C: at 100,000 ranks a loop in Python costs seconds."""
    if not timings:
        return None
    c = columns(timings)
    moves = [b > 0 for b in c.bytes]
    moving = sum(moves)
    if moving in (0, len(moves)):
        ranks, moved, io = c.ranks, c.bytes, c.io_mean
    else:
        ranks = tuple(compress(c.ranks, moves))
        moved, io = tuple(compress(c.bytes, moves)), tuple(compress(c.io_mean, moves))
    spanned = all(c.started_at) and all(c.ended_at)
    counted = [
        (r, n) for r, n in zip(c.read_bytes, c.needed_bytes, strict=True) if r is not None and n
    ]
    return OpPart(
        timed=len(timings),
        moving=moving,
        seconds=per_sample_max(c.seconds),
        worst=max(c.stats, key=lambda s: s.mean),
        starts=per_sample_min(c.started_at) if spanned else None,
        ends=per_sample_max(c.ended_at) if spanned else None,
        slowest=max(zip(io, [-r for r in ranks], strict=True)),
        fastest=min(io),
        rates=list(map(rank_throughput, moved, io)),
        own=max([p + i for p, i in zip(c.planning_mean, c.io_mean, strict=True)]),
        planning=max(c.planning_mean),
        gc=max((g for g in c.gc_mean if g is not None), default=None),
        rank0=c.stats[c.ranks.index(0)] if 0 in c.ranks else None,
        io=list(c.io_mean) if len(timings) <= RANKS_LISTED else None,
        blocked=_ranked(c.ranks, c.blocked),
        staging=_ranked(c.ranks, c.staging),
        background=_ranked(c.ranks, c.background),
        counted=len(counted),
        read_bytes=sum(r for r, _ in counted),
        needed_bytes=sum(n for _, n in counted),
        read_ratio=max((r / n for r, n in counted), default=0.0),
        finish=max((f for f in c.finish_mean if f is not None), default=None),
    )


def _ranked(ranks: Sequence[int], figure: Sequence[StatsRow | None]) -> Ranked:
    return [(rank, s) for rank, s in zip(ranks, figure, strict=True) if s is not None]


def combine_ops(parts: Sequence[OpPart | None]) -> OpPart | None:
    """One operation over the parts' ranks together; ``parts`` in rank order."""
    timed = [p for p in parts if p is not None]
    if len(timed) <= 1:
        return timed[0] if timed else None
    ranked = [p for p in timed if p.moving] or timed
    spanned = all(p.starts is not None and p.ends is not None for p in timed)
    total = sum(p.timed for p in timed)
    return OpPart(
        timed=total,
        moving=sum(p.moving for p in timed),
        seconds=per_sample_max([p.seconds for p in timed]),
        worst=max((p.worst for p in timed), key=lambda s: s.mean),
        starts=per_sample_min([p.starts for p in timed]) if spanned else None,
        ends=per_sample_max([p.ends for p in timed]) if spanned else None,
        slowest=max(p.slowest for p in ranked),
        fastest=min(p.fastest for p in ranked),
        rates=list(chain.from_iterable(p.rates for p in ranked)),
        own=max(p.own for p in timed),
        planning=max(p.planning for p in timed),
        gc=max((p.gc for p in timed if p.gc is not None), default=None),
        rank0=next((p.rank0 for p in timed if p.rank0 is not None), None),
        io=[x for p in timed for x in p.io or []] if total <= RANKS_LISTED else None,
        blocked=[x for p in timed for x in p.blocked],
        staging=[x for p in timed for x in p.staging],
        background=[x for p in timed for x in p.background],
        counted=sum(p.counted for p in timed),
        read_bytes=sum(p.read_bytes for p in timed),
        needed_bytes=sum(p.needed_bytes for p in timed),
        read_ratio=max(p.read_ratio for p in timed),
        finish=max((p.finish for p in timed if p.finish is not None), default=None),
    )


def resource_part(records: Sequence[RankRecord]) -> ResourcePart | None:
    reported = [r.resources for r in records if r.resources is not None]
    if not reported:
        return None
    # One pass reads each rank's figures, then columns.
    user, system, peak, sent, received = zip(
        *[
            (x.cpu_user_seconds, x.cpu_system_seconds, x.peak_rss_bytes, x.sent_bytes,
             x.received_bytes)
            for x in reported
        ],
        strict=True,
    )  # fmt: skip
    return ResourcePart(
        ranks=len(reported),
        cpu_user=max(user),
        cpu_system=max(system),
        peak_rss=max((p for p in peak if p is not None), default=None),
        sent_max=max(sent),
        received_max=max(received),
        sent=sum(sent),
        received=sum(received),
    )


def combine_resources(parts: Sequence[ResourcePart | None]) -> ResourcePart | None:
    reported = [p for p in parts if p is not None]
    if len(reported) <= 1:
        return reported[0] if reported else None
    return ResourcePart(
        ranks=sum(p.ranks for p in reported),
        cpu_user=max(p.cpu_user for p in reported),
        cpu_system=max(p.cpu_system for p in reported),
        peak_rss=max((p.peak_rss for p in reported if p.peak_rss is not None), default=None),
        sent_max=max(p.sent_max for p in reported),
        received_max=max(p.received_max for p in reported),
        sent=sum(p.sent for p in reported),
        received=sum(p.received for p in reported),
    )


def slowest_of(records: Sequence[RankRecord]) -> tuple[float, int] | None:
    """Max of (save plus load mean I/O seconds, -rank) over the ranks that timed either: ties go
    to the lower rank, whatever order the records come in."""
    found: tuple[float, int] | None = None
    for r in records:
        save, load = r.save, r.load
        if save is None and load is None:
            continue
        own = (save.timing.io_mean if save is not None else 0.0) + (
            load.timing.io_mean if load is not None else 0.0
        )
        if found is None or (own, -r.rank) > found:
            found = (own, -r.rank)
    return found


def part_of(records: Sequence[RankRecord]) -> Part:
    """The reduction of one part's records (any records: a whole run is one part too)."""
    return Part(
        save=op_part(rank_ops(records, "save")),
        load=op_part(rank_ops(records, "load")),
        delete=op_part(rank_ops(records, "delete")),
        resources=resource_part(records),
        slowest=slowest_of(records),
    )


def combine(parts: Sequence[Part]) -> Part:
    """The parts' reductions together; ``parts`` in rank order."""
    if len(parts) == 1:
        return parts[0]
    return Part(
        save=combine_ops([p.save for p in parts]),
        load=combine_ops([p.load for p in parts]),
        delete=combine_ops([p.delete for p in parts]),
        resources=combine_resources([p.resources for p in parts]),
        slowest=max((p.slowest for p in parts if p.slowest is not None), default=None),
    )


def cut(ordered: Sequence[RankRecord]) -> list[Sequence[RankRecord]]:
    """``ordered`` (by rank, each rank once) cut into parts of :data:`PART_RANKS` consecutive
    ranks: a part holds the same ranks whatever the other ranks reported."""
    if not ordered:
        return []
    out: list[Sequence[RankRecord]] = []
    start = 0
    while start < len(ordered):
        bound = (ordered[start].rank // PART_RANKS + 1) * PART_RANKS
        end = bisect_left(ordered, bound, lo=start, key=lambda r: r.rank)
        out.append(ordered[start:end])
        start = end
    return out


def reduce(
    ordered: Sequence[RankRecord], part: Callable[[Sequence[RankRecord]], Part] = part_of
) -> Part:
    """The run's reduction: ``part`` of each part of ``ordered``, combined. ``part`` may be a
    memo of :func:`part_of` (the operator's), which must give what it would."""
    return combine([part(chunk) for chunk in cut(ordered)] or [part_of([])])
