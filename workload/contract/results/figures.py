"""Every figure ckptbench publishes, each computed by one function here, from the ranks' results.

The table, the JSON and CSV files, the report's plots, the operator's status and its metrics read
these figures; none computes its own. Each is defined in docs/measurement.md.

A figure over ranks is computed in two steps: the ranks' records (:mod:`.records`) are reduced
part by part to the maxima, minima, sums and lists it needs (:mod:`.parts`), and it is finished
here from the reduction. The reductions are the same however the ranks are cut, so the local
runner (one part per 1,024 ranks, as everywhere) and the operator (which keeps each part's
reduction between reconciles) publish the same figures.

- per sample: :func:`collective_seconds` (max over ranks), :func:`span_seconds` (latest end minus
  earliest start);
- per rank: :func:`moved_bytes` (with the records) and :func:`rank_throughput` (the rank's bytes
  / its mean I/O; with the parts);
- per operation: :func:`op_summary` (an :class:`OpSummary`), gathered by
  :func:`summarize_records` over the ranks' records, which :func:`summarize` makes of results;
- uncertainty: the intervals each figure carries, from :mod:`.intervals`;
- MLPerf Storage's, under its names: from :mod:`.mlperf_figures`;
- across operations: :func:`slowest_rank`; the checkpoint as stored: :func:`stored_figures`.

Pure: no torch, no storage client. The operator calls :func:`summarize_records` on the records it
keeps of the ranks' termination messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from ckptbench.workload.contract.choices import Procedure
from ckptbench.workload.contract.results import both, mlperf_rules, parts, per_sample, stats
from ckptbench.workload.contract.results.intervals import mean_interval, rate_interval
from ckptbench.workload.contract.results.mlperf_figures import mlperf_metrics
from ckptbench.workload.contract.results.parts import OpPart, Part, ResourcePart, rank_throughput
from ckptbench.workload.contract.results.per_sample import (
    collective_seconds,
    run_samples_of,
    span_seconds,
)
from ckptbench.workload.contract.results.rank import (
    ROUND,
    Leftovers,
    OpStats,
    RankResult,
    RunFigures,
)
from ckptbench.workload.contract.results.records import (
    Operation,
    RankOp,
    RankRecord,
    StatsRow,
    moved_bytes,
    rank_ops,
    record_of,
)
from ckptbench.workload.contract.results.run_samples import Vectors
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

# Per rank, defined with the records and their parts; per sample, with where they come from.
__all__ = [
    "Operation",
    "RankOp",
    "collective_seconds",
    "moved_bytes",
    "rank_ops",
    "rank_throughput",
    "run_samples_of",
    "span_seconds",
]


# -- per sample ----------------------------------------------------------------------------------


# collective_seconds and span_seconds, with where an operation's per-sample figures come from:
# in :mod:`.per_sample`.


# -- per operation -------------------------------------------------------------------------------


def op_summary(
    op: OpPart | None, total_bytes: int, idle: int = 0, run: RunFigures | Vectors | None = None
) -> OpSummary | None:
    """One operation's figures from the reduction of the ranks that timed it (:mod:`.parts`);
    ``idle`` ranks took no part (they are counted among the ranks left out). ``run``: rank 0's
    reduction of every rank's full lists (:func:`run_samples_of`) of this operation, which
    stands in for the ranks' own lists when their messages could not carry them."""
    if op is None:
        return None
    found = per_sample.figures(op, run)
    collective, span_stats = found.seconds, found.spans
    samples, spans = found.listed
    span_mean = span_stats.mean if span_stats is not None else None
    mean_ci = mean_interval(collective)
    span_ci = mean_interval(span_stats)
    slowest_seconds, slowest_rank = op.slowest
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
        min_rank_throughput_bytes_per_second=min(op.rates),
        median_rank_throughput_bytes_per_second=stats.percentile(op.rates, 50),
        # A rank that moved nothing (outside a resharding load's world) is not ranked.
        ranks_left_out=op.timed - (op.moving or op.timed) + idle,
        slowest_rank=-slowest_rank,  # ties went to the lower rank
        slowest_rank_seconds=slowest_seconds,
        fastest_rank_seconds=op.fastest,
        planning_mean_seconds=op.planning,
        collective_overhead_seconds=round(max(0.0, collective.mean - op.own), ROUND),
        rank_io_seconds=op.io,
        rank0_mean_seconds=op.rank0.mean if op.rank0 else None,
        rank0_mean_seconds_ci=mean_interval(op.rank0.stats() if op.rank0 else None),
        rank0_stdev_seconds=op.rank0.stdev if op.rank0 else None,
        **_async_spreads(op),
        span_mean_seconds=span_mean,
        span_mean_seconds_ci=span_ci,
        span_throughput_bytes_per_second=(
            stats.throughput(total_bytes, span_mean) if span_mean is not None else None
        ),
        span_throughput_bytes_per_second_ci=rate_interval(total_bytes, span_ci),
        gc_mean_seconds=op.gc,
        finish_mean_seconds=op.finish,
        seconds=samples,
        span_seconds=spans,
        per_sample=found.source,
    )


def read_amplification(op: OpPart) -> dict[str, float | None]:
    """Bytes read from storage over the stored bytes the load plans needed: summed over the
    ranks that needed bytes, and the largest per rank. Empty when no rank counted."""
    if not op.counted:
        return {}
    return {
        "read_amplification": round(op.read_bytes / op.needed_bytes, ROUND),
        "max_rank_read_amplification": round(op.read_ratio, ROUND),
    }


def with_parity_figures(summary: OpSummary | None, op: OpPart | None) -> OpSummary | None:
    """The figures issue 23 added beside op_summary's: read amplification."""
    if summary is None or op is None:
        return summary
    added = read_amplification(op)
    return summary.model_copy(update=added) if added else summary


def resource_summary(
    part: ResourcePart | None, slowest: int | None, by_rank: Mapping[int, RankRecord]
) -> ResourceSummary | None:
    """The ranks' resources: maxima per rank, traffic totals, and the slowest rank's own."""
    if part is None:
        return None
    own = by_rank.get(slowest) if slowest is not None else None
    return ResourceSummary(
        ranks=part.ranks,
        max_cpu_user_seconds=part.cpu_user,
        max_cpu_system_seconds=part.cpu_system,
        # The run's one peak-memory figure (docs/measurement.md, "Peak memory").
        max_peak_rss_bytes=part.peak_rss,
        max_sent_bytes=part.sent_max,
        max_received_bytes=part.received_max,
        sent_bytes=part.sent,
        received_bytes=part.received,
        slowest_rank=slowest,
        slowest_rank_resources=(
            own.resources.resources() if own is not None and own.resources else None
        ),
    )


def ram_rule_figures(records: Sequence[RankRecord]) -> dict[str, Any]:
    """MLPerf's 3 x RAM rule for the ``file`` backend (the ranks recorded a cache mode)."""
    cache = next((r.cache for r in records if r.cache is not None), None)
    rule = mlperf_rules.ram_rule(records, cache)
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


def _async_spreads(op: OpPart) -> dict[str, RankSpread | None]:
    """An async save's stall (``blocked``), staging and background spreads across the ranks that
    timed each; all None for an operation no rank timed any of them in (every load and delete,
    and a sync save)."""
    if not (op.blocked or op.staging or op.background):
        return {"stall": None, "staging": None, "background": None}
    return {
        "stall": spread_of(op.blocked),
        "staging": spread_of(op.staging),
        "background": spread_of(op.background),
    }


def spread_of(timed: Sequence[tuple[int, OpStats | StatsRow]]) -> RankSpread | None:
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


def summarize_train(records: Sequence[RankRecord]) -> TrainSummary | None:
    """The training step beside the saves, across the ranks that ran it."""
    ranks = [(r.rank, r.train) for r in records if r.train is not None]
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


def checkpointer_peak_rss(records: Sequence[RankRecord]) -> int | None:
    """The largest peak resident memory of a rank's checkpointer process (save mode process).
    The rank's own process's is the resources' (:func:`resource_summary`)."""
    peaks = [
        r.checkpointer_peak_rss_bytes for r in records if r.checkpointer_peak_rss_bytes is not None
    ]
    return max(peaks) if peaks else None


def idle_ranks(records: Sequence[RankRecord], op: Operation) -> int:
    """Ranks that took no part in ``op``: no timing of it, and no bytes to move in it (a restore
    onto more ranks adds ranks that save, and so delete, nothing)."""
    return sum(1 for r in records if getattr(r, op) is None and moved_bytes(r, op) == 0)


def summarize(
    results: Sequence[RankResult],
    world_size: int,
    total_bytes: int,
    load_world_size: int | None = None,
) -> RunSummary:
    """Aggregate the ranks' results into the run's summary (:func:`summarize_records`)."""
    return summarize_records(
        [record_of(r) for r in results], world_size, total_bytes, load_world_size
    )


def summarize_records(
    records: Sequence[RankRecord],
    world_size: int,
    total_bytes: int,
    load_world_size: int | None = None,
    part: Callable[[Sequence[RankRecord]], Part] = parts.part_of,
) -> RunSummary:
    """Aggregate the ranks' records into the run's summary: ``max(world_size,
    load_world_size)`` ranks are expected (the second when a restore is onto more ranks).
    ``part`` reduces each part of the ranks (:func:`.parts.reduce`)."""
    ranks = rank_count(world_size, load_world_size)
    by_rank = {r.rank: r for r in records if 0 <= r.rank < ranks}
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
    whole = parts.reduce(ordered, part)
    run = per_sample.run_of(by_rank.get(0), len(ordered), ranks)
    save = op_summary(
        whole.save, total_bytes, idle_ranks(ordered, "save"), per_sample.of_run(run, "save")
    )
    load = with_parity_figures(
        op_summary(whole.load, total_bytes, run=per_sample.of_run(run, "load")), whole.load
    )
    delete = op_summary(
        whole.delete, total_bytes, idle_ranks(ordered, "delete"), per_sample.of_run(run, "delete")
    )
    slowest = -whole.slowest[1] if whole.slowest is not None else None
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
        resources=resource_summary(whole.resources, slowest, by_rank),
        train=summarize_train(ordered),
        both=both.summarize([(r.rank, r.both) for r in ordered if r.both is not None]),
        checkpointer_peak_rss_bytes=checkpointer_peak_rss(ordered),
        errors=errors[:_ERRORS_LISTED],
        error_count=len(errors),
        procedure=procedure,
        cache=ordered[0].cache if ordered else None,
        mlperf=(
            mlperf_metrics(save, load, total_bytes, per_sample.run_rates(run))
            if procedure is Procedure.MLPERF
            else None
        ),
        left=leftovers(ordered),
        **ram_rule_figures(ordered),
    )


def leftovers(records: Sequence[RankRecord]) -> Leftovers | None:
    """The objects the run could not delete: the sum of each rank's own (rank 0 counts only what
    no other rank's prefix names), under the run's folder; None when every rank removed its own."""
    left = [r.left for r in records if r.left is not None]
    if not left:
        return None
    return Leftovers(objects=sum(x.objects for x in left), under=left[0].under)


# -- across operations, and the checkpoint as stored ---------------------------------------------


def slowest_rank(records: Sequence[RankRecord]) -> int | None:
    """The rank whose own save plus load I/O time is the largest: the one holding the others up
    (ties go to the lower rank). I/O time is timed inside the storage layer; barrier-to-barrier
    time is equal on every rank."""
    found = parts.slowest_of(records)
    return -found[1] if found is not None else None


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
