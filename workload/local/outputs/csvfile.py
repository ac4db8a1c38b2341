"""``ckptbench run --csv FILE``: one row per cell, its settings then its figures, for spreadsheets.

Where a figure is one MLPerf Storage reports, its column carries MLPerf's name too (MLPerf labels
GiB as "GB"; these columns are GiB, 2^30 bytes, as MLPerf's are):

- ``checkpoint_size_GB``: the checkpoint's payload, all ranks;
- ``checkpoint_write_bw_gibps`` / ``checkpoint_read_bw_gibps``: total GiB over the mean duration,
  a duration being the slowest rank's (MLPerf's rule: duration = max over processes);
- ``checkpoint_write_duration_secs`` / ``checkpoint_read_duration_secs`` and
  ``save_checkpoint_duration_mean_seconds`` / ``load_...``: that mean duration;
- ``save_checkpoint_io_mean_GB_per_second`` / ``..._stdev_...`` (and ``load_``): the mean and
  sample stdev over samples of total GiB / that sample's duration, as DLIO summarises them.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ckptbench.workload.contract.results import OpSummary, RunSummary
from ckptbench.workload.contract.sizes import GIB

# Settings that only repeat another column in a form for people.
_SKIPPED_SETTINGS = {"part_size"}

_OP_FIGURES: list[tuple[str, Callable[[OpSummary], float | int | None]]] = [
    ("samples", lambda o: o.samples),
    ("mean_seconds", lambda o: o.mean_seconds),
    ("stdev_seconds", lambda o: o.stdev_seconds),
    ("p50_seconds", lambda o: o.p50_seconds),
    ("p90_seconds", lambda o: o.p90_seconds),
    ("max_seconds", lambda o: o.max_seconds),
    ("throughput_gib_per_second", lambda o: o.throughput_bytes_per_second / GIB),
    ("min_rank_gib_per_second", lambda o: o.min_rank_throughput_bytes_per_second / GIB),
    ("gc_mean_seconds", lambda o: o.gc_mean_seconds or 0.0),
]

_MLPERF_OP = {"save": "write", "load": "read"}


def _per_sample_gib_s(s: RunSummary, op: OpSummary) -> list[float]:
    return [s.total_bytes / GIB / x for x in (op.seconds or []) if x > 0]


def _mlperf(s: RunSummary) -> dict[str, Any]:
    row: dict[str, Any] = {"checkpoint_size_GB": s.total_bytes / GIB}
    for op_name, short in _MLPERF_OP.items():
        op: OpSummary | None = getattr(s, op_name)
        rates = _per_sample_gib_s(s, op) if op is not None else []
        row[f"checkpoint_{short}_bw_gibps"] = op.throughput_bytes_per_second / GIB if op else None
        row[f"checkpoint_{short}_duration_secs"] = op.mean_seconds if op else None
        row[f"{op_name}_checkpoint_duration_mean_seconds"] = op.mean_seconds if op else None
        row[f"{op_name}_checkpoint_io_mean_GB_per_second"] = (
            statistics.fmean(rates) if rates else None
        )
        row[f"{op_name}_checkpoint_io_stdev_GB_per_second"] = (
            statistics.stdev(rates) if len(rates) >= 2 else None
        )
    return row


def settings_of(s: RunSummary) -> dict[str, Any]:
    settings: dict[str, Any] = {"world_size": s.world_size}
    for k, v in s.extra.get("settings", {}).items():
        if k not in _SKIPPED_SETTINGS:
            settings[k] = v
    return settings


def figures_of(s: RunSummary) -> dict[str, Any]:
    row: dict[str, Any] = {
        "succeeded": s.succeeded,
        "ranks_reported": s.ranks_reported,
        "total_bytes": s.total_bytes,
        "shard_bytes": s.shard_bytes,
    }
    for op_name in ("save", "load"):
        op: OpSummary | None = getattr(s, op_name)
        for name, get in _OP_FIGURES:
            row[f"{op_name}_{name}"] = get(op) if op is not None else None
    row["save_blocked_mean_seconds"] = s.save.blocked_mean_seconds if s.save else None
    row["verified"] = s.verified
    row.update(_mlperf(s))
    return row


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
        return f"{value:.6g}"
    return str(value)


def write_csv(path: Path, runs: Sequence[tuple[str, RunSummary]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(to_csv(runs))
    tmp.replace(path)
