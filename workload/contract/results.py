"""Result models and their pure aggregation, shared by the workload and the operator.

A rank reports a :class:`RankResult`. Its compact JSON form is the container's termination
message (Kubernetes keeps at most 4 KiB of it), so it always carries summary statistics and keeps
the per-sample lists only while they fit. :func:`summarize` turns the ranks' results into one
:class:`RunSummary`; the local runner prints it and the operator derives the status from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ckptbench.workload.contract import stats
from ckptbench.workload.contract.choices import CacheMode, Procedure

SCHEMA_VERSION = 2
TERMINATION_MESSAGE_LIMIT = 4096
_ERROR_LIMIT = 1000
_ROUND = 6  # microseconds: far below any measured operation, and keeps the JSON short
_GIB = 1024**3
RANKS_LISTED = 64  # per-rank I/O seconds in the summary, bounded whatever the world size


class OpStats(BaseModel):
    """Statistics of one operation's samples, in seconds."""

    model_config = ConfigDict(frozen=True)

    n: int = Field(ge=0)
    mean: float
    stdev: float
    p50: float
    p90: float
    max: float
    min: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> OpStats:
        return cls(
            n=len(samples),
            mean=round(stats.mean(samples), _ROUND),
            stdev=round(stats.stdev(samples), _ROUND),
            p50=round(stats.percentile(samples, 50), _ROUND),
            p90=round(stats.percentile(samples, 90), _ROUND),
            max=round(max(samples), _ROUND),
            min=round(min(samples), _ROUND),
        )


class OpTiming(BaseModel):
    """One operation (save or load) on one rank, over its timed samples.

    ``seconds`` is barrier to barrier: the collective duration as this rank saw it, the same on
    every rank because DCP ends each operation with collectives. What tells ranks apart is timed
    inside the storage layer (:mod:`ckptbench.workload.storage.timing`): ``io`` is this rank's own
    I/O (``write_data``/``read_data`` until their futures complete, plus ``finish``, the
    ``.metadata`` write, on the coordinator), ``planning`` runs from DCP's first storage call to
    the start of data I/O (it includes exchanging plans). For an async save, ``seconds`` runs until
    the checkpoint is durable and ``blocked`` is how long the caller was blocked (which includes
    DCP's staging copy of the shard). ``started_at``/``ended_at`` are each sample's wall-clock
    start and end on this rank (Unix seconds), for the mlperf procedure's durations. ``gc`` is
    the time automatic garbage collections took inside the operation on this rank (absent when
    none ran: the ``manual`` garbage collection setting keeps them out).
    """

    model_config = ConfigDict(frozen=True)

    stats: OpStats
    io: OpStats
    planning: OpStats
    finish: OpStats | None = None
    blocked: OpStats | None = None
    gc: OpStats | None = None
    seconds: list[float] | None = None
    io_seconds: list[float] | None = None
    planning_seconds: list[float] | None = None
    finish_seconds: list[float] | None = None
    blocked_seconds: list[float] | None = None
    gc_seconds: list[float] | None = None
    started_at: list[float] | None = None
    ended_at: list[float] | None = None

    @classmethod
    def of(
        cls,
        seconds: Sequence[float],
        io_seconds: Sequence[float],
        planning_seconds: Sequence[float] | None = None,
        *,
        finish_seconds: Sequence[float] | None = None,
        blocked_seconds: Sequence[float] | None = None,
        gc_seconds: Sequence[float] | None = None,
        started_at: Sequence[float] | None = None,
        ended_at: Sequence[float] | None = None,
    ) -> OpTiming:
        planning = planning_seconds if planning_seconds else [0.0] * len(seconds)
        finish = finish_seconds if finish_seconds and any(finish_seconds) else None
        collected = gc_seconds if gc_seconds and any(gc_seconds) else None
        return cls(
            stats=OpStats.of(seconds),
            io=OpStats.of(io_seconds),
            planning=OpStats.of(planning),
            finish=OpStats.of(finish) if finish else None,
            blocked=OpStats.of(blocked_seconds) if blocked_seconds else None,
            gc=OpStats.of(collected) if collected else None,
            seconds=_rounded(seconds),
            io_seconds=_rounded(io_seconds),
            planning_seconds=_rounded(planning),
            finish_seconds=_rounded(finish) if finish else None,
            blocked_seconds=_rounded(blocked_seconds) if blocked_seconds else None,
            gc_seconds=_rounded(collected) if collected else None,
            started_at=_rounded(started_at) if started_at else None,
            ended_at=_rounded(ended_at) if ended_at else None,
        )

    def without_samples(self) -> OpTiming:
        return self.model_copy(update=dict.fromkeys(_SAMPLE_LISTS))


_SAMPLE_LISTS = (
    "seconds",
    "io_seconds",
    "planning_seconds",
    "finish_seconds",
    "blocked_seconds",
    "gc_seconds",
    "started_at",
    "ended_at",
)


class RankResult(BaseModel):
    """What one rank reports. ``save``/``load`` are absent when the rank failed before them."""

    model_config = ConfigDict(frozen=True)

    v: int = SCHEMA_VERSION
    rank: int = Field(ge=0)
    host: str = ""
    bytes: int = Field(0, ge=0, description="Bytes in this rank's shard.")
    save: OpTiming | None = None
    load: OpTiming | None = None
    verified: bool | None = Field(None, description="Every load verified; None when not checked.")
    setup_seconds: float | None = Field(
        None, description="Making the storage client and authenticating, once, before timing."
    )
    read_paths: dict[str, int] | None = Field(
        None,
        description=(
            "gcs: loaded items per read path: direct (ranged reads into the tensor), scattered "
            "(into the tensor within a coalesced read), copied (payload copied from a coalesced "
            "read), generic (torch.load), bytes (non-tensors)."
        ),
    )
    left_behind: str | None = Field(
        None,
        description=(
            "After a failure: what this rank could not delete of the failed sample's "
            "checkpoint (a count, the first names and the first error)."
        ),
    )
    error: str | None = None
    procedure: Procedure = Field(Procedure.CKPTBENCH, description="The procedure that ran.")
    cache: CacheMode | None = Field(
        None, description="file backend: whether written files were evicted before each load."
    )

    def to_termination_message(self, limit: int = TERMINATION_MESSAGE_LIMIT) -> str:
        """Compact JSON of at most ``limit`` bytes: samples go first, then the error is cut."""
        text = self._compact()
        if len(text.encode()) <= limit:
            return text
        slim = self.model_copy(
            update={
                "save": self.save.without_samples() if self.save else None,
                "load": self.load.without_samples() if self.load else None,
            }
        )
        text = slim._compact()
        overflow = len(text.encode()) - limit
        if overflow > 0 and slim.error:
            keep = max(0, len(slim.error) - overflow - 16)
            slim = slim.model_copy(update={"error": slim.error[:keep] + "…"})
            text = slim._compact()
        return text

    @classmethod
    def from_termination_message(cls, text: str) -> RankResult:
        return cls.model_validate_json(text)

    def _compact(self) -> str:
        return self.model_dump_json(exclude_none=True)

    @staticmethod
    def error_text(exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}"
        return text if len(text) <= _ERROR_LIMIT else text[: _ERROR_LIMIT - 1] + "…"


class OpSummary(BaseModel):
    """One operation across all ranks, in the reference's terms and MLPerf Storage's.

    Per-rank figures (slowest rank, per-rank throughput) come from each rank's own I/O time,
    measured inside the storage layer: barrier-to-barrier time is the same on every rank.
    """

    model_config = ConfigDict(frozen=True)

    samples: int
    mean_seconds: float = Field(description="Mean collective duration (max over ranks per sample).")
    stdev_seconds: float
    p50_seconds: float
    p90_seconds: float
    max_seconds: float
    min_seconds: float
    throughput_bytes_per_second: float = Field(
        description="Total checkpoint bytes / mean collective duration (the reference's figure)."
    )
    min_rank_throughput_bytes_per_second: float = Field(
        description="Lowest per-rank throughput: shard bytes / the rank's mean I/O seconds."
    )
    median_rank_throughput_bytes_per_second: float = Field(
        0.0, description="Median per-rank throughput: shard bytes / the rank's mean I/O seconds."
    )
    slowest_rank: int = Field(description="The rank with the largest mean I/O seconds.")
    slowest_rank_seconds: float = Field(description="The slowest rank's mean I/O seconds.")
    fastest_rank_seconds: float = Field(description="The fastest rank's mean I/O seconds.")
    planning_mean_seconds: float = Field(
        0.0, description="Largest per-rank mean planning seconds (plans made and exchanged)."
    )
    collective_overhead_seconds: float = Field(
        0.0,
        description="Mean collective duration beyond the slowest rank's planning plus I/O: "
        "waiting in DCP's collectives and barriers.",
    )
    rank_io_seconds: list[float] | None = Field(
        None,
        description=f"Each rank's mean I/O seconds, by rank (up to {RANKS_LISTED} ranks).",
    )
    rank0_mean_seconds: float | None = Field(
        None, description="Rank 0's mean barrier-to-barrier seconds: the reference's figure."
    )
    rank0_stdev_seconds: float | None = None
    blocked_mean_seconds: float | None = Field(
        None, description="Async save: mean time the caller was blocked (includes staging)."
    )
    span_mean_seconds: float | None = Field(
        None,
        description="Mean over samples of the latest rank end minus the earliest rank start "
        "(MLPerf Storage's duration).",
    )
    gc_mean_seconds: float | None = Field(
        None,
        description="Largest per-rank mean seconds of automatic garbage collection inside the "
        "operation (absent when no rank collected).",
    )
    seconds: list[float] | None = Field(
        None, description="Per-sample collective durations, when every rank reported them."
    )


class RankError(BaseModel):
    model_config = ConfigDict(frozen=True)

    rank: int
    host: str = ""
    error: str


class RunSummary(BaseModel):
    """The whole run. Bounded in size whatever the world size: per-rank detail is not kept here."""

    model_config = ConfigDict(frozen=True)

    v: int = SCHEMA_VERSION
    world_size: int
    ranks_reported: int
    missing_ranks: list[int] = Field(
        default_factory=list, description="Ranks that did not report (at most the first 20)."
    )
    missing_rank_count: int = 0
    total_bytes: int
    shard_bytes: int = Field(description="The largest shard.")
    save: OpSummary | None = None
    load: OpSummary | None = None
    verified: bool | None = Field(None, description="Every rank verified every load.")
    errors: list[RankError] = Field(default_factory=list, description="At most the first 10.")
    error_count: int = 0
    procedure: Procedure = Field(Procedure.CKPTBENCH, description="The procedure that ran.")
    cache: CacheMode | None = Field(
        None, description="file backend: whether written files were evicted before each load."
    )
    mlperf: dict[str, float] | None = Field(
        None, description="The mlperf procedure's figures under MLPerf Storage's metric names."
    )
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Settings and versions the result depends on."
    )

    @property
    def succeeded(self) -> bool:
        return (
            self.ranks_reported == self.world_size
            and self.error_count == 0
            and self.verified is not False
            and self.save is not None
            and self.load is not None
        )


_MISSING_LISTED = 20
_ERRORS_LISTED = 10


def summarize(results: Sequence[RankResult], world_size: int, total_bytes: int) -> RunSummary:
    """Aggregate the ranks' results. Pure: the operator calls it on termination messages."""
    by_rank = {r.rank: r for r in results if 0 <= r.rank < world_size}
    missing = [rank for rank in range(world_size) if rank not in by_rank]
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
    save = summarize_op([(r.rank, r.bytes, r.save) for r in ordered if r.save], total_bytes)
    load = summarize_op([(r.rank, r.bytes, r.load) for r in ordered if r.load], total_bytes)
    return RunSummary(
        world_size=world_size,
        ranks_reported=len(ordered),
        missing_ranks=missing[:_MISSING_LISTED],
        missing_rank_count=len(missing),
        total_bytes=total_bytes,
        shard_bytes=max((r.bytes for r in ordered), default=0),
        save=save,
        load=load,
        verified=verified,
        errors=errors[:_ERRORS_LISTED],
        error_count=len(errors),
        procedure=procedure,
        cache=ordered[0].cache if ordered else None,
        mlperf=mlperf_metrics(save, load, total_bytes) if procedure is Procedure.MLPERF else None,
    )


def summarize_op(
    timings: Sequence[tuple[int, int, OpTiming]], total_bytes: int
) -> OpSummary | None:
    """One operation across ranks: ``(rank, shard bytes, timing)`` for each rank that has it."""
    if not timings:
        return None
    if all(t.seconds for _, _, t in timings):
        per_sample = stats.elementwise_max([t.seconds or [] for _, _, t in timings])
        collective = OpStats.of(per_sample)
        seconds: list[float] | None = per_sample
    else:
        # Some rank's message was too long for its samples: the worst rank's statistics stand in.
        collective = max((t.stats for _, _, t in timings), key=lambda s: s.mean)
        seconds = None
    # Ties go to the lower rank, so the answer does not depend on the order ranks reported in.
    slowest_rank, _, slowest = max(timings, key=lambda x: (x[2].io.mean, -x[0]))
    fastest = min(t.io.mean for _, _, t in timings)
    rank_tp = [stats.throughput(b, t.io.mean) for _, b, t in timings]
    own = max(t.planning.mean + t.io.mean for _, _, t in timings)
    blocked = [t.blocked.mean for _, _, t in timings if t.blocked]
    collected = [t.gc.mean for _, _, t in timings if t.gc]
    rank0 = next((t.stats for rank, _, t in timings if rank == 0), None)
    return OpSummary(
        samples=collective.n,
        mean_seconds=collective.mean,
        stdev_seconds=collective.stdev,
        p50_seconds=collective.p50,
        p90_seconds=collective.p90,
        max_seconds=collective.max,
        min_seconds=collective.min,
        throughput_bytes_per_second=stats.throughput(total_bytes, collective.mean),
        min_rank_throughput_bytes_per_second=min(rank_tp),
        median_rank_throughput_bytes_per_second=stats.percentile(rank_tp, 50),
        slowest_rank=slowest_rank,
        slowest_rank_seconds=slowest.io.mean,
        fastest_rank_seconds=fastest,
        planning_mean_seconds=max(t.planning.mean for _, _, t in timings),
        collective_overhead_seconds=round(max(0.0, collective.mean - own), _ROUND),
        rank_io_seconds=(
            [t.io.mean for _, _, t in timings] if len(timings) <= RANKS_LISTED else None
        ),
        rank0_mean_seconds=rank0.mean if rank0 else None,
        rank0_stdev_seconds=rank0.stdev if rank0 else None,
        blocked_mean_seconds=max(blocked) if blocked else None,
        span_mean_seconds=_span_mean(timings),
        gc_mean_seconds=max(collected) if collected else None,
        seconds=seconds,
    )


def _span_mean(timings: Sequence[tuple[int, int, OpTiming]]) -> float | None:
    """Mean over samples of (latest rank end - earliest rank start), when every rank has them."""
    starts = [t.started_at for _, _, t in timings]
    ends = [t.ended_at for _, _, t in timings]
    if not all(starts) or not all(ends):
        return None
    n = min(len(x or []) for x in (*starts, *ends))
    if n == 0:
        return None
    spans = [max((e or [])[i] for e in ends) - min((s or [])[i] for s in starts) for i in range(n)]
    return round(stats.mean(spans), _ROUND)


# MLPerf Storage's names (DLIO's summary keys and the report's columns). It labels GiB as "GB".
def mlperf_metrics(
    save: OpSummary | None, load: OpSummary | None, total_bytes: int
) -> dict[str, float]:
    """The mlperf procedure's figures: duration is the span, throughput total GiB / duration."""
    out: dict[str, float] = {"checkpoint_size_GB": round(total_bytes / _GIB, 6)}
    for op, name, column in ((save, "save", "write"), (load, "load", "read")):
        if op is None:
            continue
        duration = op.span_mean_seconds if op.span_mean_seconds is not None else op.mean_seconds
        per_sample = [stats.throughput(total_bytes, x) / _GIB for x in op.seconds or []]
        out[f"{name}_checkpoint_duration_mean_seconds"] = round(duration, _ROUND)
        if per_sample:
            out[f"{name}_checkpoint_io_mean_GB_per_second"] = round(stats.mean(per_sample), _ROUND)
            out[f"{name}_checkpoint_io_stdev_GB_per_second"] = round(
                stats.stdev(per_sample), _ROUND
            )
        out[f"checkpoint_{column}_bw_gibps"] = round(
            stats.throughput(total_bytes, duration) / _GIB, _ROUND
        )
        out[f"checkpoint_{column}_duration_secs"] = round(duration, _ROUND)
        out[f"checkpoint_{column}_min_rank_gibps"] = round(
            op.min_rank_throughput_bytes_per_second / _GIB, _ROUND
        )
        out[f"checkpoint_{column}_median_rank_gibps"] = round(
            op.median_rank_throughput_bytes_per_second / _GIB, _ROUND
        )
    return out


def _rounded(xs: Sequence[float]) -> list[float]:
    return [round(x, _ROUND) for x in xs]
