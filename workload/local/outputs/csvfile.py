"""``ckptbench run --csv FILE``: one row per cell, its settings then its figures, for spreadsheets.

Every figure is read from the cell's :class:`RunSummary`, where
:mod:`ckptbench.workload.contract.results.figures` computed it; none is computed here (rates are
only converted to GiB/s, 2^30 bytes). Columns are named as in the JSON, each operation's prefixed
with ``save_`` or ``load_``; see docs/measurement.md for what each means. MLPerf Storage's figures
(MLPerf labels GiB as "GB") are the summary's ``mlperf`` block, under MLPerf's names: filled only
when the mlperf procedure ran, since only then were they measured MLPerf's way (its order and its
duration, the span).
Each mean's 95% interval (``X_ci`` in the JSON) is two columns, ``<op>_X_ci_low`` and
``<op>_X_ci_high``: empty with one sample, ``inf`` for a rate unbounded above.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from ckptbench.workload.contract.checkpoint.sizes import GIB
from ckptbench.workload.contract.results import figures, mlperf_figures
from ckptbench.workload.contract.results.summaries import (
    BothSummary,
    Interval,
    OpSummary,
    RankSpread,
    RunSummary,
    Slowdown,
    TrainSummary,
)

# Settings that only repeat another column in a form for people.
_SKIPPED_SETTINGS = {"part_size"}


def _gib(x: float | None) -> float | None:
    return None if x is None else x / GIB


def _low(get: Callable[[OpSummary], Interval | None]) -> Callable[[OpSummary], float | None]:
    """An interval's lower bound; empty without an interval (one sample)."""

    def low(o: OpSummary) -> float | None:
        ci = get(o)
        return None if ci is None else ci.low

    return low


def _high(get: Callable[[OpSummary], Interval | None]) -> Callable[[OpSummary], float | None]:
    """An interval's upper bound; ``inf`` when unbounded above, empty without an interval."""

    def high(o: OpSummary) -> float | None:
        ci = get(o)
        return None if ci is None else math.inf if ci.high is None else ci.high

    return high


def _intervals(
    name: str, get: Callable[[OpSummary], Interval | None], scale: Callable[[Any], Any]
) -> list[tuple[str, Callable[[OpSummary], float | int | None]]]:
    """The ``<name>_ci_low`` and ``<name>_ci_high`` columns of a figure's interval."""
    return [
        (f"{name}_ci_low", lambda o: scale(_low(get)(o))),
        (f"{name}_ci_high", lambda o: scale(_high(get)(o))),
    ]


def _same(x: Any) -> Any:
    return x


_OP_FIGURES: list[tuple[str, Callable[[OpSummary], float | int | None]]] = [
    ("samples", lambda o: o.samples),
    ("mean_seconds", lambda o: o.mean_seconds),
    *_intervals("mean_seconds", lambda o: o.mean_seconds_ci, _same),
    ("stdev_seconds", lambda o: o.stdev_seconds),
    ("p50_seconds", lambda o: o.p50_seconds),
    ("p90_seconds", lambda o: o.p90_seconds),
    ("p99_seconds", lambda o: o.p99_seconds),
    ("max_seconds", lambda o: o.max_seconds),
    ("min_seconds", lambda o: o.min_seconds),
    ("throughput_gib_per_second", lambda o: _gib(o.throughput_bytes_per_second)),
    *_intervals("throughput_gib_per_second", lambda o: o.throughput_bytes_per_second_ci, _gib),
    ("min_rank_gib_per_second", lambda o: _gib(o.min_rank_throughput_bytes_per_second)),
    ("median_rank_gib_per_second", lambda o: _gib(o.median_rank_throughput_bytes_per_second)),
    ("ranks_left_out", lambda o: o.ranks_left_out),
    ("slowest_rank", lambda o: o.slowest_rank),
    ("slowest_rank_seconds", lambda o: o.slowest_rank_seconds),
    ("fastest_rank_seconds", lambda o: o.fastest_rank_seconds),
    ("planning_mean_seconds", lambda o: o.planning_mean_seconds),
    ("collective_overhead_seconds", lambda o: o.collective_overhead_seconds),
    ("span_mean_seconds", lambda o: o.span_mean_seconds),
    *_intervals("span_mean_seconds", lambda o: o.span_mean_seconds_ci, _same),
    ("span_throughput_gib_per_second", lambda o: _gib(o.span_throughput_bytes_per_second)),
    *_intervals(
        "span_throughput_gib_per_second", lambda o: o.span_throughput_bytes_per_second_ci, _gib
    ),
    ("rank0_mean_seconds", lambda o: o.rank0_mean_seconds),
    *_intervals("rank0_mean_seconds", lambda o: o.rank0_mean_seconds_ci, _same),
    ("rank0_stdev_seconds", lambda o: o.rank0_stdev_seconds),
    ("gc_mean_seconds", lambda o: o.gc_mean_seconds or 0.0),
    ("finish_mean_seconds", lambda o: o.finish_mean_seconds or 0.0),
    ("read_amplification", lambda o: o.read_amplification),
    ("max_rank_read_amplification", lambda o: o.max_rank_read_amplification),
]


def _stored(s: RunSummary) -> dict[str, Any]:
    stored = figures.stored_figures(s)
    return {
        "stored_bytes": stored.stored_bytes if stored else None,
        "stored_per_payload": stored.stored_per_payload if stored else None,
        "stored_objects": stored.objects if stored else None,
        "metadata_bytes": stored.metadata_bytes if stored else None,
    }


def _mlperf(s: RunSummary) -> dict[str, Any]:
    measured = s.mlperf or {}
    return {key: measured.get(key) for key in mlperf_figures.mlperf_keys()}


_RESOURCES = (
    "max_cpu_user_seconds",
    "max_cpu_system_seconds",
    "max_peak_rss_bytes",
    "max_sent_bytes",
    "max_received_bytes",
    "sent_bytes",
    "received_bytes",
)
_SLOWEST_RANK_RESOURCES = (
    "cpu_user_seconds",
    "cpu_system_seconds",
    "peak_rss_bytes",
    "sent_bytes",
    "received_bytes",
)


def _resources(s: RunSummary) -> dict[str, Any]:
    """The ranks' resources (``rank_`` columns) and the slowest rank's (``slowest_rank_``)."""
    r = s.resources
    own = r.slowest_rank_resources if r else None
    row = {f"rank_{k}": getattr(r, k) if r else None for k in _RESOURCES}
    row.update({f"slowest_rank_{k}": getattr(own, k) if own else None
                for k in _SLOWEST_RANK_RESOURCES})  # fmt: skip
    return row


def settings_of(s: RunSummary) -> dict[str, Any]:
    settings: dict[str, Any] = {"world_size": s.world_size}
    for k, v in s.extra.get("settings", {}).items():
        if k not in _SKIPPED_SETTINGS:
            # A group of settings (data_loading) as one JSON cell, not Python's repr of a dict.
            settings[k] = json.dumps(v, sort_keys=True) if isinstance(v, dict) else v
    return settings


def figures_of(s: RunSummary) -> dict[str, Any]:
    row: dict[str, Any] = {
        "succeeded": s.succeeded,
        "ranks_reported": s.ranks_reported,
        "total_bytes": s.total_bytes,
        "shard_bytes": s.shard_bytes,
        "load_shard_bytes": s.load_shard_bytes,
        **_stored(s),
    }
    for op_name in ("save", "load", "delete"):
        op: OpSummary | None = getattr(s, op_name)
        for name, get in _OP_FIGURES:
            row[f"{op_name}_{name}"] = get(op) if op is not None else None
    for name in ("stall", "staging", "background"):
        spread: RankSpread | None = getattr(s.save, name) if s.save is not None else None
        for key in ("mean_seconds", "slowest_rank", "slowest_rank_seconds", "max_seconds"):
            row[f"save_{name}_{key}"] = getattr(spread, key) if spread is not None else None
    row.update(_train(s.train))
    row.update(_both(s.both))
    row["checkpointer_peak_rss_bytes"] = s.checkpointer_peak_rss_bytes
    row["verified"] = s.verified
    row.update(_resources(s))
    row.update(_mlperf(s))
    row.update(mlperf_figures.mlperf_v3_columns(s.mlperf))
    row["mlperf_category"] = s.mlperf_category
    row["mlperf_open_reasons"] = "; ".join(s.mlperf_open_reasons or []) or None
    row["ram_rule"] = s.ram_rule
    return row


def _both(b: BothSummary | None) -> dict[str, Any]:
    """Both demands at once, one column per figure (a slowdown: its ratio, its interval's
    bounds and its rank), empty without a loader."""
    row: dict[str, Any] = {}
    for name, info in BothSummary.model_fields.items():
        value = getattr(b, name) if b is not None else None
        if info.annotation is Slowdown:
            interval = value.interval if value is not None else None
            row[f"both_{name}"] = value.ratio if value is not None else None
            row[f"both_{name}_low"] = interval.low if interval is not None else None
            row[f"both_{name}_high"] = interval.high if interval is not None else None
            row[f"both_{name}_rank"] = value.rank if value is not None else None
        else:
            row[f"both_{name}"] = value
    return row


def _train(t: TrainSummary | None) -> dict[str, Any]:
    """The training step's figures, one column each (empty without a training step)."""
    figures: dict[str, Any] = {}
    if t is not None:
        figures = {
            "intervals": t.intervals,
            "matrix_used": t.matrix,
            "step_threads": t.step_threads,
            "cpus": t.cpus,
            "step_seconds": t.step_seconds,
            "in_flight_step_seconds": t.in_flight_step_seconds,
            "wait_mean_seconds": t.wait.mean_seconds,
            "wait_slowest_rank_seconds": t.wait.slowest_rank_seconds,
            "stall_mean_seconds": t.stall.mean_seconds,
            "stall_slowest_rank_seconds": t.stall.slowest_rank_seconds,
            "overhead": t.overhead,
            "overhead_slowest_rank": t.overhead_slowest_rank,
            "overhead_rank_mean": t.overhead_rank_mean,
            "overhead_max": t.overhead_max,
        }
    return {f"train_{k}": figures.get(k) for k in TRAIN_COLUMNS}


# Beside the settings train_every and train_matrix: the matrix a step-time target chose.
TRAIN_COLUMNS = (
    "intervals",
    "matrix_used",
    "step_threads",
    "cpus",
    "step_seconds",
    "in_flight_step_seconds",
    "wait_mean_seconds",
    "wait_slowest_rank_seconds",
    "stall_mean_seconds",
    "stall_slowest_rank_seconds",
    "overhead",
    "overhead_slowest_rank",
    "overhead_rank_mean",
    "overhead_max",
)


def to_csv(runs: Sequence[tuple[str, RunSummary]]) -> str:
    if not runs:
        raise ValueError("to_csv: no cells to write")
    settings = [settings_of(s) for _, s in runs]
    figures = [figures_of(s) for _, s in runs]
    # Cells may differ in which settings apply (threads only for gcs): the union, first seen first.
    setting_columns = list(dict.fromkeys(k for row in settings for k in row))
    columns = ["cell", "cell_index", *setting_columns, *figures[0]]
    rows = [
        {"cell": label, "cell_index": i + 1, **settings[i], **figures[i]}
        for i, (label, _) in enumerate(runs)
    ]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row.get(k)) for k in columns})
    return out.getvalue()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # every digit the JSON has: the same figure reads the same in both
    return str(value)
