"""MLPerf Storage's figures under its own names: DLIO's summary keys, the report's columns, and
MLPerf Storage v3.0's published columns, each read from an operation's summary.

Every rate and size is in GiB (2^30 bytes), which MLPerf labels "GB".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from ckptbench.workload.contract.checkpoint.sizes import GIB
from ckptbench.workload.contract.results import stats
from ckptbench.workload.contract.results.rank import ROUND
from ckptbench.workload.contract.results.summaries import OpSummary

MlperfOperation = Literal["save", "load"]

MLPERF_COLUMNS: dict[MlperfOperation, str] = {
    "save": "write",
    "load": "read",
}  # MLPerf times no delete


def mlperf_keys() -> list[str]:
    """Every key :func:`mlperf_metrics` can give, in its order (the CSV's columns)."""
    keys = ["checkpoint_size_GB"]
    for name, column in MLPERF_COLUMNS.items():
        keys += [
            f"{name}_checkpoint_duration_mean_seconds",
            f"{name}_checkpoint_io_mean_GB_per_second",
            f"{name}_checkpoint_io_stdev_GB_per_second",
            f"checkpoint_{column}_bw_gibps",
            f"checkpoint_{column}_duration_secs",
            f"checkpoint_{column}_min_rank_gibps",
            f"checkpoint_{column}_median_rank_gibps",
        ]
    return keys


def sample_rates(samples: Sequence[float], total_bytes: int) -> tuple[float, float]:
    """MLPerf's per-sample rates, total bytes / 2^30 / each sample's seconds, summarised as DLIO
    does: their mean and population stdev (numpy's ``std``)."""
    per_sample = [stats.throughput(total_bytes, x) / GIB for x in samples]
    return round(stats.mean(per_sample), ROUND), round(stats.pstdev(per_sample), ROUND)


def mlperf_metrics(
    save: OpSummary | None,
    load: OpSummary | None,
    total_bytes: int,
    run_rates: Mapping[str, tuple[float, float] | None] | None = None,
) -> dict[str, float]:
    """MLPerf Storage's figures under its names (DLIO's summary keys and the report's columns).

    Its duration is the span; its bandwidth total bytes / mean span; per sample, total bytes /
    that sample's span, summarised as DLIO does (mean and population stdev, numpy's ``std``).
    MLPerf labels GiB as "GB": every rate and size here is in GiB (2^30 bytes). When some rank's
    message was too long to carry its sample times, the collective duration stands in for the
    span. ``run_rates``: per operation, :func:`sample_rates` as rank 0 computed them of the run's
    samples, for when the summary's lists are absent (rank 0's message kept only its figures).
    """
    out: dict[str, float] = {"checkpoint_size_GB": round(total_bytes / GIB, ROUND)}
    ops: dict[MlperfOperation, OpSummary | None] = {"save": save, "load": load}
    for name, column in MLPERF_COLUMNS.items():
        op = ops[name]
        if op is None:
            continue
        if op.span_mean_seconds is not None and op.span_throughput_bytes_per_second is not None:
            duration, rate = op.span_mean_seconds, op.span_throughput_bytes_per_second
            samples = op.span_seconds or []
        else:
            duration, rate = op.mean_seconds, op.throughput_bytes_per_second
            samples = op.seconds or []
        rates = sample_rates(samples, total_bytes) if samples else (run_rates or {}).get(name)
        out[f"{name}_checkpoint_duration_mean_seconds"] = round(duration, ROUND)
        if rates is not None:
            out[f"{name}_checkpoint_io_mean_GB_per_second"] = rates[0]
            out[f"{name}_checkpoint_io_stdev_GB_per_second"] = rates[1]
        out[f"checkpoint_{column}_bw_gibps"] = round(rate / GIB, ROUND)
        out[f"checkpoint_{column}_duration_secs"] = round(duration, ROUND)
        out[f"checkpoint_{column}_min_rank_gibps"] = round(
            op.min_rank_throughput_bytes_per_second / GIB, ROUND
        )
        out[f"checkpoint_{column}_median_rank_gibps"] = round(
            op.median_rank_throughput_bytes_per_second / GIB, ROUND
        )
    return out


# MLPerf Storage v3.0's published column names, each the figure of ours it reads.
MLPERF_V3_COLUMNS = {
    "Write B/W (GiB/s)": "checkpoint_write_bw_gibps",
    "Write Duration (secs)": "checkpoint_write_duration_secs",
    "Read B/W (GiB/s)": "checkpoint_read_bw_gibps",
    "Read Duration (secs)": "checkpoint_read_duration_secs",
}


def mlperf_v3_columns(mlperf: Mapping[str, float] | None) -> dict[str, float | None]:
    """The mlperf procedure's figures under MLPerf Storage v3.0's published column names."""
    measured = mlperf or {}
    return {column: measured.get(key) for column, key in MLPERF_V3_COLUMNS.items()}
