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

SCHEMA_VERSION = 1
TERMINATION_MESSAGE_LIMIT = 4096
_ERROR_LIMIT = 1000
_ROUND = 6  # microseconds: far below any measured operation, and keeps the JSON short


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
    """One operation (save or load) on one rank.

    ``seconds`` is barrier to barrier, so it includes waiting for the slowest rank: the collective
    duration as this rank saw it. ``own_seconds`` stops when this rank's part was done, before the
    closing barrier: it is what tells ranks apart. For an async save, ``seconds`` runs until the
    checkpoint is durable and ``blocked_seconds`` is how long the caller was blocked.
    """

    model_config = ConfigDict(frozen=True)

    stats: OpStats
    own: OpStats
    blocked: OpStats | None = None
    seconds: list[float] | None = None
    own_seconds: list[float] | None = None
    blocked_seconds: list[float] | None = None

    @classmethod
    def of(
        cls,
        seconds: Sequence[float],
        own_seconds: Sequence[float],
        blocked_seconds: Sequence[float] | None = None,
    ) -> OpTiming:
        return cls(
            stats=OpStats.of(seconds),
            own=OpStats.of(own_seconds),
            blocked=OpStats.of(blocked_seconds) if blocked_seconds else None,
            seconds=_rounded(seconds),
            own_seconds=_rounded(own_seconds),
            blocked_seconds=_rounded(blocked_seconds) if blocked_seconds else None,
        )

    def without_samples(self) -> OpTiming:
        return self.model_copy(
            update={"seconds": None, "own_seconds": None, "blocked_seconds": None}
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
            "gcs: loaded items per read path: direct (ranged reads into the tensor), copied "
            "(payload copied from a coalesced read), generic (torch.load), bytes (non-tensors)."
        ),
    )
    error: str | None = None

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
    """One operation across all ranks, in the reference's terms and MLPerf Storage's."""

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
        description="Lowest per-rank throughput: shard bytes / the rank's own mean (MLPerf's)."
    )
    slowest_rank: int
    slowest_rank_seconds: float = Field(description="The slowest rank's own mean seconds.")
    fastest_rank_seconds: float
    blocked_mean_seconds: float | None = Field(
        None, description="Async save: mean time the caller was blocked."
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
    return RunSummary(
        world_size=world_size,
        ranks_reported=len(ordered),
        missing_ranks=missing[:_MISSING_LISTED],
        missing_rank_count=len(missing),
        total_bytes=total_bytes,
        shard_bytes=max((r.bytes for r in ordered), default=0),
        save=summarize_op([(r.rank, r.bytes, r.save) for r in ordered if r.save], total_bytes),
        load=summarize_op([(r.rank, r.bytes, r.load) for r in ordered if r.load], total_bytes),
        verified=verified,
        errors=errors[:_ERRORS_LISTED],
        error_count=len(errors),
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
    slowest_rank, _, slowest = max(timings, key=lambda x: x[2].own.mean)
    fastest = min(t.own.mean for _, _, t in timings)
    min_rank_tp = min(stats.throughput(b, t.own.mean) for _, b, t in timings)
    blocked = [t.blocked.mean for _, _, t in timings if t.blocked]
    return OpSummary(
        samples=collective.n,
        mean_seconds=collective.mean,
        stdev_seconds=collective.stdev,
        p50_seconds=collective.p50,
        p90_seconds=collective.p90,
        max_seconds=collective.max,
        min_seconds=collective.min,
        throughput_bytes_per_second=stats.throughput(total_bytes, collective.mean),
        min_rank_throughput_bytes_per_second=min_rank_tp,
        slowest_rank=slowest_rank,
        slowest_rank_seconds=slowest.own.mean,
        fastest_rank_seconds=fastest,
        blocked_mean_seconds=max(blocked) if blocked else None,
        seconds=seconds,
    )


def _rounded(xs: Sequence[float]) -> list[float]:
    return [round(x, _ROUND) for x in xs]
