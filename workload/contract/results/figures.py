"""Every figure ckptbench publishes, each computed by one function here, from the ranks' results.

The table, the JSON and CSV files, the report's plots, the operator's status and its metrics read
these figures; none computes its own. Each is defined in docs/measurement.md.

- per sample: :func:`collective_seconds` (max over ranks), :func:`span_seconds` (latest end minus
  earliest start);
- per rank: :func:`moved_bytes` and :func:`rank_throughput` (the rank's bytes / its mean I/O);
- per operation: :func:`summarize_op` (an :class:`OpSummary`), gathered by :func:`summarize`;
- uncertainty: the intervals each figure carries, from :mod:`.intervals`;
- MLPerf Storage's, under its names: from :mod:`.mlperf_figures`;
- across operations: :func:`slowest_rank`; the checkpoint as stored: :func:`stored_figures`.

Pure: no torch, no storage client. The operator calls these on termination messages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from ckptbench.workload.contract.choices import Procedure
from ckptbench.workload.contract.results import mlperf_rules, stats
from ckptbench.workload.contract.results.intervals import mean_interval, rate_interval
from ckptbench.workload.contract.results.mlperf_figures import mlperf_metrics
from ckptbench.workload.contract.results.rank import ROUND, OpStats, OpTiming, RankResult
from ckptbench.workload.contract.results.summaries import (
    RANKS_LISTED,
    OpSummary,
    RankError,
    RankSpread,
    ResourceSummary,
    RunSummary,
    TrainSummary,
    rank_count,
)

_MISSING_LISTED = 20
_ERRORS_LISTED = 10

Operation = Literal["save", "load", "delete"]


class RankOp(NamedTuple):
    """One rank's timing of one operation and the tensor bytes it moved in it."""

    rank: int
    bytes: int
    timing: OpTiming


# -- per rank ------------------------------------------------------------------------------------


def moved_bytes(result: RankResult, op: Operation) -> int:
    """Tensor bytes the rank moved: its shard on save (and delete); on load, what its load
    template held."""
    if op == "load" and result.load_bytes is not None:
        return result.load_bytes
    return result.bytes


def rank_throughput(r: RankOp) -> float:
    """The rank's bytes / its mean I/O seconds (MLPerf Storage's per-process figure)."""
    return stats.throughput(r.bytes, r.timing.io.mean)


def rank_ops(results: Sequence[RankResult], op: Operation) -> list[RankOp]:
    """``(rank, bytes moved, timing)`` of each rank that timed ``op``, in the order given."""
    out = []
    for r in results:
        timing: OpTiming | None = getattr(r, op)
        if timing is not None:
            out.append(RankOp(r.rank, moved_bytes(r, op), timing))
    return out


# -- per sample ----------------------------------------------------------------------------------


def collective_seconds(timings: Sequence[RankOp]) -> list[float] | None:
    """Each sample's collective duration: the max over ranks (a collective lasts as long as its
    slowest rank). None when some rank's message was too long to carry its samples."""
    if not timings or not all(t.timing.seconds for t in timings):
        return None
    return stats.elementwise_max([t.timing.seconds or [] for t in timings])


def span_seconds(timings: Sequence[RankOp]) -> list[float] | None:
    """Each sample's span: the latest rank end minus the earliest rank start (wall clock)."""
    starts = [t.timing.started_at for t in timings]
    ends = [t.timing.ended_at for t in timings]
    if not timings or not all(starts) or not all(ends):
        return None
    latest = [max(column) for column in zip(*(e or [] for e in ends), strict=False)]
    earliest = [min(column) for column in zip(*(s or [] for s in starts), strict=False)]
    n = min(len(latest), len(earliest))
    if n == 0:
        return None
    return [round(latest[i] - earliest[i], ROUND) for i in range(n)]


# -- per operation -------------------------------------------------------------------------------


def summarize_op(timings: Sequence[RankOp], total_bytes: int, idle: int = 0) -> OpSummary | None:
    """One operation across the ranks that timed it; ``idle`` ranks took no part (they are
    counted among the ranks left out)."""
    if not timings:
        return None
    per_sample = collective_seconds(timings)
    if per_sample is not None:
        collective = OpStats.of(per_sample)
    else:
        # Some rank's message was too long for its samples: the worst rank's statistics stand in.
        collective = max((t.timing.stats for t in timings), key=lambda s: s.mean)
    # One pass over the ranks for every per-rank figure: at 100,000 ranks each pass costs.
    # A rank that moved nothing (outside a resharding load's world) has no throughput to rank.
    moving = [t for t in timings if t.bytes > 0] or list(timings)
    own = planning = -math.inf
    collected: list[float] = []
    rank0: OpStats | None = None
    for t in timings:
        timing = t.timing
        planned = timing.planning.mean
        if planned + timing.io.mean > own:
            own = planned + timing.io.mean
        if planned > planning:
            planning = planned
        if timing.gc:
            collected.append(timing.gc.mean)
        if rank0 is None and t.rank == 0:
            rank0 = timing.stats
    # Ties go to the lower rank, so the answer does not depend on the order ranks reported in.
    slowest = fastest = moving[0]
    for t in moving:
        io = t.timing.io.mean
        if io > slowest.timing.io.mean or (io == slowest.timing.io.mean and t.rank < slowest.rank):
            slowest = t
        if io < fastest.timing.io.mean:
            fastest = t
    rates = [rank_throughput(t) for t in moving]
    spans = span_seconds(timings)
    span_mean = round(stats.mean(spans), ROUND) if spans else None
    mean_ci = mean_interval(collective)
    span_ci = mean_interval(OpStats.of(spans)) if spans else None
    return OpSummary(
        samples=collective.n,
        mean_seconds=collective.mean,
        mean_seconds_ci=mean_ci,
        stdev_seconds=collective.stdev,
        p50_seconds=collective.p50,
        p90_seconds=collective.p90,
        p99_seconds=collective.p99,
        max_seconds=collective.max,
        min_seconds=collective.min,
        throughput_bytes_per_second=stats.throughput(total_bytes, collective.mean),
        throughput_bytes_per_second_ci=rate_interval(total_bytes, mean_ci),
        min_rank_throughput_bytes_per_second=min(rates),
        median_rank_throughput_bytes_per_second=stats.percentile(rates, 50),
        ranks_left_out=len(timings) - len(moving) + idle,
        slowest_rank=slowest.rank,
        slowest_rank_seconds=slowest.timing.io.mean,
        fastest_rank_seconds=fastest.timing.io.mean,
        planning_mean_seconds=planning,
        collective_overhead_seconds=round(max(0.0, collective.mean - own), ROUND),
        rank_io_seconds=(
            [t.timing.io.mean for t in timings] if len(timings) <= RANKS_LISTED else None
        ),
        rank0_mean_seconds=rank0.mean if rank0 else None,
        rank0_mean_seconds_ci=mean_interval(rank0),
        rank0_stdev_seconds=rank0.stdev if rank0 else None,
        **_async_spreads(timings),
        span_mean_seconds=span_mean,
        span_mean_seconds_ci=span_ci,
        span_throughput_bytes_per_second=(
            stats.throughput(total_bytes, span_mean) if span_mean is not None else None
        ),
        span_throughput_bytes_per_second_ci=rate_interval(total_bytes, span_ci),
        gc_mean_seconds=max(collected) if collected else None,
        seconds=per_sample,
        span_seconds=spans,
    )


def read_amplification(timings: Sequence[RankOp]) -> dict[str, float | None]:
    """Bytes read from storage over the stored bytes the load plans needed: summed over the
    ranks that needed bytes, and the largest per rank. Empty when no rank counted."""
    counted = [
        (t.timing.read_bytes, t.timing.needed_bytes)
        for t in timings
        if t.timing.read_bytes is not None and t.timing.needed_bytes
    ]
    if not counted:
        return {}
    read = sum(r for r, _ in counted)
    needed = sum(n for _, n in counted)
    return {
        "read_amplification": round(read / needed, ROUND),
        "max_rank_read_amplification": round(max(r / n for r, n in counted), ROUND),
    }


def with_parity_figures(op: OpSummary | None, timings: Sequence[RankOp]) -> OpSummary | None:
    """The figures issue 23 added beside summarize_op's: read amplification."""
    if op is None:
        return None
    added = read_amplification(timings)
    return op.model_copy(update=added) if added else op


def resource_summary(results: Sequence[RankResult]) -> ResourceSummary | None:
    """The ranks' resources: maxima per rank, traffic totals, and the slowest rank's own."""
    reported = [(r.rank, r.resources) for r in results if r.resources is not None]
    if not reported:
        return None
    own = [x for _, x in reported]
    # The run's one peak-memory figure (docs/measurement.md, "Peak memory").
    peaks = [x.peak_rss_bytes for x in own if x.peak_rss_bytes is not None]
    slowest = slowest_rank(results)
    return ResourceSummary(
        ranks=len(own),
        max_cpu_user_seconds=max(x.cpu_user_seconds for x in own),
        max_cpu_system_seconds=max(x.cpu_system_seconds for x in own),
        max_peak_rss_bytes=max(peaks) if peaks else None,
        max_sent_bytes=max(x.sent_bytes for x in own),
        max_received_bytes=max(x.received_bytes for x in own),
        sent_bytes=sum(x.sent_bytes for x in own),
        received_bytes=sum(x.received_bytes for x in own),
        slowest_rank=slowest,
        slowest_rank_resources=next((x for rank, x in reported if rank == slowest), None),
    )


def ram_rule_figures(results: Sequence[RankResult]) -> dict[str, Any]:
    """MLPerf's 3 x RAM rule for the ``file`` backend (the ranks recorded a cache mode)."""
    cache = next((r.cache for r in results if r.cache is not None), None)
    rule = mlperf_rules.ram_rule(results, cache)
    if rule is None:
        return {}
    return {
        "ram_rule": rule.verdict,
        "ram_rule_written_bytes": rule.written_bytes,
        "ram_rule_memory_bytes": rule.memory_bytes,
    }


def category_figures(settings: Mapping[str, Any]) -> dict[str, Any]:
    """MLPerf Storage's CLOSED/OPEN label of a run of these recorded settings, and why OPEN."""
    found = mlperf_rules.category(settings)
    if found is None:
        return {}
    return {"mlperf_category": found.label, "mlperf_open_reasons": found.reasons or None}


def _async_spreads(timings: Sequence[RankOp]) -> dict[str, RankSpread | None]:
    """An async save's stall, staging and background spreads; all None, in one pass, for an
    operation no rank timed any of them in (every load and delete, and a sync save)."""
    if not any(t.timing.blocked or t.timing.staging or t.timing.background for t in timings):
        return {"stall": None, "staging": None, "background": None}
    return {
        "stall": rank_spread(timings, "blocked"),
        "staging": rank_spread(timings, "staging"),
        "background": rank_spread(timings, "background"),
    }


def rank_spread(
    timings: Sequence[RankOp], figure: Literal["blocked", "staging", "background"]
) -> RankSpread | None:
    """A per-rank figure of an async save (``blocked`` is the stall) across the ranks that timed
    it. None when no rank timed it (a sync save; staging inside the call)."""
    return spread_of([(t.rank, s) for t in timings if (s := getattr(t.timing, figure)) is not None])


def spread_of(timed: Sequence[tuple[int, OpStats]]) -> RankSpread | None:
    """Each rank's statistics of one figure, across ranks: mean over ranks of each rank's mean,
    the slowest rank and its mean, the largest sample. None when no rank has the figure."""
    if not timed:
        return None
    # Ties go to the lower rank, as for the slowest I/O rank.
    slowest, worst = max(timed, key=lambda rs: (rs[1].mean, -rs[0]))
    means = [s.mean for _, s in timed]
    return RankSpread(
        mean_seconds=round(stats.mean(means), ROUND),
        slowest_rank=slowest,
        slowest_rank_seconds=worst.mean,
        max_seconds=max(s.max for _, s in timed),
        rank_seconds=means if len(timed) <= RANKS_LISTED else None,
    )


def summarize_train(results: Sequence[RankResult]) -> TrainSummary | None:
    """The training step beside the saves, across the ranks that ran it."""
    ranks = [(r.rank, r.train) for r in results if r.train is not None]
    if not ranks:
        return None
    trains = [t for _, t in ranks]
    flying = [t.in_flight_step.mean for t in trains if t.in_flight_step is not None]
    wait = spread_of([(rank, t.wait) for rank, t in ranks])
    stall = spread_of([(rank, t.stall) for rank, t in ranks])
    if wait is None or stall is None:  # pragma: no cover - ranks is not empty
        return None
    slowest, worst = max(ranks, key=lambda rt: (rt[1].overhead.mean, -rt[0]))
    return TrainSummary(
        every=trains[0].every,
        intervals=min(t.stall.n for t in trains),
        matrix=max(t.matrix for t in trains),
        step_threads=min(t.step_threads for t in trains),
        cpus=min(t.cpus for t in trains),
        step_seconds=round(stats.mean([t.step.p50 for t in trains]), ROUND),
        in_flight_step_seconds=round(stats.mean(flying), ROUND) if flying else None,
        in_flight_steps=sum(t.in_flight_steps for t in trains),
        wait=wait,
        stall=stall,
        overhead=worst.overhead.mean,
        overhead_slowest_rank=slowest,
        overhead_rank_mean=round(stats.mean([t.overhead.mean for t in trains]), ROUND),
        overhead_max=max(t.overhead.max for t in trains),
    )


def checkpointer_peak_rss(results: Sequence[RankResult]) -> int | None:
    """The largest peak resident memory of a rank's checkpointer process (save mode process).
    The rank's own process's is the resources' (:func:`resource_summary`)."""
    peaks = [
        r.checkpointer_peak_rss_bytes for r in results if r.checkpointer_peak_rss_bytes is not None
    ]
    return max(peaks) if peaks else None


def idle_ranks(results: Sequence[RankResult], op: Operation) -> int:
    """Ranks that took no part in ``op``: no timing of it, and no bytes to move in it (a restore
    onto more ranks adds ranks that save, and so delete, nothing)."""
    return sum(1 for r in results if getattr(r, op) is None and moved_bytes(r, op) == 0)


def summarize(
    results: Sequence[RankResult],
    world_size: int,
    total_bytes: int,
    load_world_size: int | None = None,
) -> RunSummary:
    """Aggregate the ranks' results into the run's summary: ``max(world_size,
    load_world_size)`` ranks are expected (the second when a restore is onto more ranks)."""
    ranks = rank_count(world_size, load_world_size)
    by_rank = {r.rank: r for r in results if 0 <= r.rank < ranks}
    missing = [rank for rank in range(ranks) if rank not in by_rank]
    ordered = [by_rank[rank] for rank in sorted(by_rank)]
    errors = [RankError(rank=r.rank, host=r.host, error=r.error) for r in ordered if r.error]
    verdicts = [r.verified for r in ordered]
    if any(v is False for v in verdicts):
        verified: bool | None = False
    elif ordered and not missing and all(v is True for v in verdicts):
        verified = True
    else:
        verified = None
    procedure = ordered[0].procedure if ordered else Procedure.CKPTBENCH
    save = summarize_op(rank_ops(ordered, "save"), total_bytes, idle_ranks(ordered, "save"))
    loads = rank_ops(ordered, "load")
    load = with_parity_figures(summarize_op(loads, total_bytes), loads)
    delete = summarize_op(rank_ops(ordered, "delete"), total_bytes, idle_ranks(ordered, "delete"))
    loaded = [r.load_bytes for r in ordered if r.load_bytes is not None]
    return RunSummary(
        world_size=world_size,
        load_world_size=load_world_size,
        ranks_reported=len(ordered),
        missing_ranks=missing[:_MISSING_LISTED],
        missing_rank_count=len(missing),
        total_bytes=total_bytes,
        shard_bytes=max((r.bytes for r in ordered), default=0),
        load_shard_bytes=max(loaded) if loaded else None,
        save=save,
        load=load,
        delete=delete,
        verified=verified,
        resources=resource_summary(ordered),
        train=summarize_train(ordered),
        checkpointer_peak_rss_bytes=checkpointer_peak_rss(ordered),
        errors=errors[:_ERRORS_LISTED],
        error_count=len(errors),
        procedure=procedure,
        cache=ordered[0].cache if ordered else None,
        mlperf=mlperf_metrics(save, load, total_bytes) if procedure is Procedure.MLPERF else None,
        **ram_rule_figures(ordered),
    )


# -- across operations, and the checkpoint as stored ---------------------------------------------


def slowest_rank(results: Sequence[RankResult]) -> int | None:
    """The rank whose own save plus load I/O time is the largest: the one holding the others up.

    I/O time is timed inside the storage layer; barrier-to-barrier time is equal on every rank.
    """

    found: int | None = None
    most = -math.inf
    for r in results:
        save, load = r.save, r.load
        if save is None and load is None:
            continue
        own = (save.io.mean if save is not None else 0) + (load.io.mean if load is not None else 0)
        # Ties go to the lower rank, whatever order the results come in.
        if own > most or (own == most and found is not None and r.rank < found):
            found, most = r.rank, own
    return found


def checkpoint_facts(results: Sequence[RankResult]) -> dict[str, int] | None:
    """What rank 0 reported of the first timed checkpoint as storage holds it, if it did."""
    return next((dict(r.checkpoint) for r in results if r.rank == 0 and r.checkpoint), None)


class StoredFigures(NamedTuple):
    stored_bytes: int  # every object of the checkpoint: data files with framing, .metadata
    objects: int | None
    metadata_bytes: int | None
    stored_per_payload: float | None  # stored bytes / tensor payload bytes


def stored_figures(summary: RunSummary) -> StoredFigures | None:
    """The first timed checkpoint as storage holds it (``extra.checkpoint``); None if unlisted."""
    facts: Mapping[str, Any] = summary.extra.get("checkpoint") or {}
    stored = facts.get("stored_bytes")
    if not isinstance(stored, int):
        return None
    objects, metadata = facts.get("objects"), facts.get("metadata_bytes")
    return StoredFigures(
        stored_bytes=stored,
        objects=objects if isinstance(objects, int) else None,
        metadata_bytes=metadata if isinstance(metadata, int) else None,
        stored_per_payload=(
            round(stored / summary.total_bytes, ROUND) if summary.total_bytes > 0 else None
        ),
    )
