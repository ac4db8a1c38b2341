"""Aggregates of the ranks' results in status form, and the bounds that keep status small.

The status stays bounded whatever the world size (etcd refuses objects over ~1.5 MiB):
aggregates, the slowest rank and short lists of missing or failed ranks only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ckptbench.operator.spec.status_schema import (
    Operation,
    PodFailure,
    RankErrorEntry,
    spread,
)
from ckptbench.operator.status.pods import RankReports, Reports, excerpt
from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.results import figures
from ckptbench.workload.contract.results.records import RankRecord
from ckptbench.workload.contract.results.summaries import OpSummary, RunSummary

LISTED = 10  # bounded lists: failed pods, unreadable results, rank errors


def slowest_rank(records: Sequence[RankRecord]) -> int | None:
    """The rank whose own save plus load I/O time is the largest (the workload's figure)."""
    return figures.slowest_rank(records)


def operation(op: OpSummary, result_pods: Mapping[int, str]) -> Operation:
    """One operation's summary in status form: bounded lists only (samples, at most 64 ranks)."""
    spreads = {
        name: spread(figure)
        for name in ("stall", "staging", "background")
        if (figure := getattr(op, name)) is not None
    }
    return Operation(
        **{**dict(op), **spreads},
        throughput=sizes.format_bytes(op.throughput_bytes_per_second) + "/s",
        slowest_rank_pod=result_pods.get(op.slowest_rank),
    )


def rank_errors(summary: RunSummary, reports: Reports) -> list[RankErrorEntry]:
    """The first few rank errors, each cut short; ``rankErrorCount`` counts them all."""
    return [
        RankErrorEntry(
            rank=e.rank,
            host=e.host,
            pod=reports.result_pods.get(e.rank, ""),
            error=excerpt(e.error),
        )
        for e in summary.errors[:LISTED]
    ]


def failed_pods(reports: RankReports[Any]) -> list[PodFailure]:
    """The first few failed pods, each error cut short; ``failedPodCount`` counts them all."""
    return [
        f.model_copy(update={"error": excerpt(f.error)}) if f.error else f
        for f in reports.failures[:LISTED]
    ]
