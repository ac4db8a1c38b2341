"""Aggregates of the ranks' results in status form, and the bounds that keep status small.

The status stays bounded whatever the world size (etcd refuses objects over ~1.5 MiB):
aggregates, the slowest rank and short lists of missing or failed ranks only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ckptbench.operator.status.phases import RunSpec
from ckptbench.operator.status.pods import PodFailure, Reports, excerpt
from ckptbench.workload.contract import figures, sizes
from ckptbench.workload.contract.results import OpSummary, RankResult, RunSummary

LISTED = 10  # bounded lists: failed pods, unreadable results, rank errors
MISSING_LISTED = 20


def ranks_status(spec: RunSpec, summary: RunSummary) -> dict[str, Any]:
    ranks: dict[str, Any] = {
        "ranksExpected": spec.world_size,
        "ranksReported": summary.ranks_reported,
        "ranksSummary": f"{summary.ranks_reported}/{spec.world_size}",
    }
    if summary.missing_rank_count:
        ranks["missingRankCount"] = summary.missing_rank_count
        ranks["missingRanks"] = summary.missing_ranks[:MISSING_LISTED]
    return ranks


def slowest_rank(results: Sequence[RankResult]) -> int | None:
    """The rank whose own save plus load I/O time is the largest (the workload's figure)."""
    return figures.slowest_rank(results)


def op_status(op: OpSummary, result_pods: Mapping[int, str]) -> dict[str, Any]:
    """One operation's summary in status form: no per-sample lists, so its size is fixed."""
    out: dict[str, Any] = {
        "samples": op.samples,
        "meanSeconds": op.mean_seconds,
        "stdevSeconds": op.stdev_seconds,
        "p50Seconds": op.p50_seconds,
        "p90Seconds": op.p90_seconds,
        "maxSeconds": op.max_seconds,
        "minSeconds": op.min_seconds,
        "throughputBytesPerSecond": round(op.throughput_bytes_per_second, 3),
        "throughput": sizes.format_bytes(op.throughput_bytes_per_second) + "/s",
        "minRankThroughputBytesPerSecond": round(op.min_rank_throughput_bytes_per_second, 3),
        "slowestRank": op.slowest_rank,
        "slowestRankSeconds": op.slowest_rank_seconds,
        "fastestRankSeconds": op.fastest_rank_seconds,
        "planningSeconds": op.planning_mean_seconds,
        "collectiveOverheadSeconds": op.collective_overhead_seconds,
    }
    if op.rank_io_seconds is not None:
        # Each rank's own mean I/O seconds, by rank; the summary keeps it only for small worlds.
        out["rankIoSeconds"] = op.rank_io_seconds
    if op.slowest_rank in result_pods:
        out["slowestRankPod"] = result_pods[op.slowest_rank]
    if op.blocked_mean_seconds is not None:
        out["blockedMeanSeconds"] = op.blocked_mean_seconds
    if op.gc_mean_seconds is not None:
        out["gcSeconds"] = op.gc_mean_seconds
    return out


def bounded_lists(summary: RunSummary, reports: Reports) -> dict[str, Any]:
    """Rank errors, failed pods and unreadable results: counts in full, the first few listed."""
    out: dict[str, Any] = {}
    if summary.error_count:
        out["rankErrorCount"] = summary.error_count
        out["rankErrors"] = [
            {"rank": e.rank, "pod": reports.result_pods.get(e.rank, ""), "error": excerpt(e.error)}
            for e in summary.errors[:LISTED]
        ]
    if reports.failures:
        out["failedPodCount"] = len(reports.failures)
        out["failedPods"] = [_failure_dict(f) for f in reports.failures[:LISTED]]
    if reports.unreadable:
        out["unreadableResultCount"] = len(reports.unreadable)
        out["unreadableResults"] = [
            {"pod": u.pod, **({"rank": u.rank} if u.rank is not None else {}), "problem": u.problem}
            for u in reports.unreadable[:LISTED]
        ]
    return out


def _failure_dict(failure: PodFailure) -> dict[str, Any]:
    optional = {
        "rank": failure.rank,
        "exitCode": failure.exit_code,
        "error": excerpt(failure.error) if failure.error else None,
    }
    known = {key: value for key, value in optional.items() if value is not None}
    return {"pod": failure.pod, "reason": failure.reason, **known}
