"""The per-sample figures of an operation over every rank, and where they come from.

A figure over samples needs, per sample, the max over ranks of the collective's duration
(:func:`collective_seconds`) and the latest end minus the earliest start (:func:`span_seconds`).
The ranks' own lists carry them while their messages can; rank 0's reduction of every rank's full
lists (:func:`run_samples_of`) carries them, or their figures, where those cannot. :func:`figures`
picks the one at hand, and says when none is (the slowest rank's own statistics stand in).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ckptbench.workload.contract.results import parts, run_samples
from ckptbench.workload.contract.results.mlperf_figures import sample_rates
from ckptbench.workload.contract.results.parts import OpPart
from ckptbench.workload.contract.results.rank import ROUND, OpStats, RunFigures, RunSamples
from ckptbench.workload.contract.results.records import Operation, RankRecord
from ckptbench.workload.contract.results.run_samples import Vectors
from ckptbench.workload.contract.results.summaries import PerSampleSource


def collective_seconds(op: OpPart) -> list[float] | None:
    """Each sample's collective duration: the max over ranks (a collective lasts as long as its
    slowest rank). None when some rank's message was too long to carry its samples."""
    return op.seconds


def span_seconds(op: OpPart) -> list[float] | None:
    """Each sample's span: the latest rank end minus the earliest rank start (wall clock)."""
    if op.starts is None or op.ends is None:
        return None
    n = min(len(op.ends), len(op.starts))
    if n == 0:
        return None
    return [round(op.ends[i] - op.starts[i], ROUND) for i in range(n)]


class PerSample(NamedTuple):
    """An operation's per-sample statistics, the lists they were computed from when at hand, and
    where they come from (:data:`~.summaries.PerSampleSource`)."""

    seconds: OpStats
    spans: OpStats | None
    listed: tuple[list[float] | None, list[float] | None]
    source: PerSampleSource


def figures(op: OpPart, run: RunFigures | Vectors | None) -> PerSample:
    """The per-sample statistics of one operation, the collective seconds' and the spans', each
    by :meth:`OpStats.of` over the run's per-sample lists: rank 0's vectors of the run when it
    sent them, else the ranks' own lists when every rank's message carried them, else the figures
    rank 0 computed of its vectors. Only when none of these came do the slowest rank's own
    statistics stand in, and ``source`` says so."""
    vectors = run if isinstance(run, Vectors) else None
    seconds = vectors.seconds if vectors is not None else collective_seconds(op)
    if seconds is not None:
        spans = vectors.spans if vectors is not None else span_seconds(op)
        return PerSample(
            OpStats.of(seconds), OpStats.of(spans) if spans else None, (seconds, spans), "run"
        )
    if isinstance(run, RunFigures):
        return PerSample(run.seconds, run.spans, (None, None), "run")
    return PerSample(op.worst.stats(), None, (None, None), "slowest rank")


def run_samples_of(records: Sequence[RankRecord], total_bytes: int) -> RunSamples:
    """Rank 0's reduction of every rank's full per-sample lists to the run's vectors (the same
    :func:`collective_seconds` and :func:`span_seconds` every summary computes), and their
    figures (:class:`RunFigures`: :meth:`OpStats.of` and MLPerf's
    :func:`~.mlperf_figures.sample_rates` of ``total_bytes``, as every summary computes them)."""
    whole = parts.reduce(sorted(records, key=lambda r: r.rank))

    def vectors(op: OpPart | None) -> Vectors | None:
        seconds = collective_seconds(op) if op is not None else None
        if op is None or seconds is None:
            return None
        return Vectors(seconds, span_seconds(op))

    found = {name: vectors(getattr(whole, name)) for name in ("save", "load", "delete")}
    packed = {name: run_samples.pack(v) for name, v in found.items() if v is not None}
    return RunSamples(
        ranks=len(records),
        # Packed vectors longer than any message can hold are left out, not refused.
        **{name: p for name, p in packed.items() if len(p) <= run_samples.MAX_PACKED},
        **{
            f"{name}_figures": RunFigures.of(v, sample_rates(v.spans or v.seconds, total_bytes))
            for name, v in found.items()
            if v is not None
        },
    )


def run_of(rank0: RankRecord | None, reported: int, ranks: int) -> RunSamples | None:
    """Rank 0's reduction (vectors or figures), when it covers every rank of the run and every
    rank reported (a rank that reported after rank 0 gathered would otherwise be left out)."""
    if rank0 is None or rank0.run is None:
        return None
    return rank0.run if rank0.run.ranks == ranks == reported else None


def run_rates(run: RunSamples | None) -> dict[str, tuple[float, float] | None]:
    """MLPerf's per-sample rates as rank 0 computed them, by operation, when it sent them."""
    if run is None:
        return {}
    return {op: f.rates for op in ("save", "load") if (f := run.figures(op)) is not None}


def of_run(run: RunSamples | None, op: Operation) -> RunFigures | Vectors | None:
    """Rank 0's vectors of ``op`` when its message kept them, else their figures."""
    if run is None:
        return None
    return run.vectors(op) or run.figures(op)
