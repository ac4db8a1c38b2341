"""The readable table of one or more runs: pure functions of :class:`RunSummary`, no I/O.

Units are 1024-based and labelled as such (GiB, GiB/s), as in the reference's published table;
a table of only small figures switches to MiB (MiB/s) so that they do not all read 0.00.
With several cells (runs) they are printed side by side, one column each, and when both ``gcs``
and ``gcsfs`` (or ``s3`` and ``s3fs``) are present a ratio column ``gcs/gcsfs`` (``s3/s3fs``) is
added: above 1 on a throughput row means the first moved more bytes per second; below 1 on a
seconds row means it took less time.
When settings other than the backend vary, the columns are headed ``cell i/N`` and the first rows
give each cell's value of every varied option. Each mean carries its 95% confidence interval
(``n/a`` with one sample), computed in :mod:`~ckptbench.workload.contract.results.figures`. A
``best`` row names the cell with the highest save and load throughput among the cells that
succeeded, only where the intervals tell it apart from every other cell; otherwise the row says
``indistinguishable`` under the cells that cannot be told apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ckptbench.workload.contract.checkpoint.sizes import GIB
from ckptbench.workload.contract.choices import Procedure
from ckptbench.workload.contract.results import figures, intervals
from ckptbench.workload.contract.results.summaries import (
    Interval,
    OpSummary,
    RankSpread,
    ResourceSummary,
    RunSummary,
    TrainSummary,
)

MIB = 1024**2

MISSING = "-"
NO_INTERVAL = "n/a"  # one sample: no spread, so no interval
INDISTINGUISHABLE = "indistinguishable"
CI = f"{round(intervals.CONFIDENCE * 100)}% CI"
# A backend and its baseline: the first pair whose two columns are both there gets a ratio column.
RATIO_PAIRS = (("gcs", "gcsfs"), ("s3", "s3fs"))


@dataclass(frozen=True)
class Row:
    label: str
    value: Callable[[RunSummary], float | int | str | None]
    fmt: Callable[[float], str]
    ratio: bool = False  # whether a gcs/gcsfs ratio means something on this row


def fmt_seconds(x: float) -> str:
    return f"{x:.3f}"


@dataclass(frozen=True)
class Unit:
    name: str
    scale: int


GIB_UNIT = Unit("GiB", GIB)
MIB_UNIT = Unit("MiB", MIB)
# Below a tenth of a GiB, two decimals of GiB lose the figure: the table switches to MiB.
_SMALL = GIB // 10


def unit_for(values: Sequence[float]) -> Unit:
    return GIB_UNIT if max(values, default=0) >= _SMALL else MIB_UNIT


def fmt_in(unit: Unit, decimals: int) -> Callable[[float], str]:
    def fmt(n: float) -> str:
        return f"{n / unit.scale:.{decimals}f}"

    return fmt


def fmt_int(x: float) -> str:
    return str(int(x))


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}x"


def fmt_interval(ci: Interval | None, fmt: Callable[[float], str]) -> str:
    """``[low, high]`` in a figure's own format; ``inf`` for a rate unbounded above; n/a for
    none (one sample)."""
    if ci is None:
        return NO_INTERVAL
    return f"[{fmt(ci.low)}, {'inf' if ci.high is None else fmt(ci.high)}]"


def _op(name: str, get: Callable[[OpSummary], Any]) -> Callable[[RunSummary], Any]:
    def value(s: RunSummary) -> float | int | None:
        op: OpSummary | None = getattr(s, name)
        return None if op is None else get(op)

    return value


class _Figure(NamedTuple):
    """One row of each operation: its label after the operation's name, the figure, its format
    (seconds, a count, or a rate in the table's unit), whether a gcs/gcsfs ratio means something.
    """

    label: str
    get: Callable[[OpSummary], float | int | Interval | None]
    kind: Literal["seconds", "count", "rate"]
    ratio: bool = False


_OP_ROWS = (
    _Figure("samples", lambda o: o.samples, "count"),
    _Figure("mean (s)", lambda o: o.mean_seconds, "seconds", ratio=True),
    _Figure(f"mean {CI} (s)", lambda o: o.mean_seconds_ci, "seconds"),
    _Figure("stdev (s)", lambda o: o.stdev_seconds, "seconds"),
    _Figure("p50 (s)", lambda o: o.p50_seconds, "seconds", ratio=True),
    _Figure("p90 (s)", lambda o: o.p90_seconds, "seconds", ratio=True),
    _Figure("max (s)", lambda o: o.max_seconds, "seconds", ratio=True),
    _Figure("throughput ({rate}/s)", lambda o: o.throughput_bytes_per_second, "rate", ratio=True),
    _Figure(f"throughput {CI} ({{rate}}/s)", lambda o: o.throughput_bytes_per_second_ci, "rate"),
    _Figure(
        "min per-rank ({rate}/s)",
        lambda o: o.min_rank_throughput_bytes_per_second,
        "rate",
        ratio=True,
    ),
    _Figure("slowest rank", lambda o: o.slowest_rank, "count"),
    # Each rank's own phases, timed inside the storage layer; the collective figures above are
    # barrier to barrier and the same on every rank.
    _Figure("planning (s)", lambda o: o.planning_mean_seconds, "seconds", ratio=True),
    _Figure("I/O slowest rank (s)", lambda o: o.slowest_rank_seconds, "seconds", ratio=True),
    _Figure("I/O fastest rank (s)", lambda o: o.fastest_rank_seconds, "seconds", ratio=True),
    _Figure("collective overhead (s)", lambda o: o.collective_overhead_seconds, "seconds"),
    # Inside the figures above: automatic garbage collections (none with manual collection).
    _Figure("garbage collection (s)", lambda o: o.gc_mean_seconds or 0.0, "seconds"),
)
# Deleting a checkpoint: the same statistics as save and load, without the rows that mean
# nothing for it (DCP plans nothing, and a deletion rate in checkpoint bytes is in the CSV/JSON).
_DELETE_ROWS = tuple(
    f
    for f in _OP_ROWS
    if f.label
    in {"samples", "mean (s)", "stdev (s)", "p50 (s)", "p90 (s)", "max (s)", "slowest rank"}
    or f.label.startswith("I/O ")
)
# Only over enough samples (stats.P99_MIN_SAMPLES): the row appears when some run has one.
_P99_ROW = _Figure("p99 (s)", lambda o: o.p99_seconds, "seconds", ratio=True)
# A resharding load's ranks outside the load world read nothing: not in the per-rank rows.
_LEFT_OUT_ROW = _Figure("ranks left out", lambda o: o.ranks_left_out, "count")
# The reference's own figures: rank 0's barrier-to-barrier mean and stdev.
_REFERENCE_ROWS = (
    _Figure("rank-0 mean (s)", lambda o: o.rank0_mean_seconds, "seconds"),
    _Figure(f"rank-0 mean {CI} (s)", lambda o: o.rank0_mean_seconds_ci, "seconds"),
    _Figure("rank-0 stdev (s)", lambda o: o.rank0_stdev_seconds, "seconds"),
)


def _op_interval(
    name: str, get: Callable[[OpSummary], Any], fmt: Callable[[float], str]
) -> Callable[[RunSummary], str | None]:
    """An interval's cell: missing without the operation, n/a without an interval."""

    def value(s: RunSummary) -> str | None:
        op: OpSummary | None = getattr(s, name)
        return None if op is None else fmt_interval(get(op), fmt)

    return value


def _rows(name: str, rate: Unit, figs: Sequence[_Figure]) -> list[Row]:
    formats = {"seconds": fmt_seconds, "count": fmt_int, "rate": fmt_in(rate, 3)}
    rows = []
    for f in figs:
        label = f"{name} {f.label.format(rate=rate.name)}"
        if CI in f.label:
            rows.append(Row(label, _op_interval(name, f.get, formats[f.kind]), str))
        else:
            rows.append(Row(label, _op(name, f.get), formats[f.kind], f.ratio))
    return rows


def _mlperf_rows(name: str, rate: Unit) -> list[Row]:
    """MLPerf Storage's duration (latest rank end - earliest start) and total / duration."""
    return [
        Row(f"{name} span (s)", _op(name, lambda o: o.span_mean_seconds), fmt_seconds),
        Row(
            f"{name} span {CI} (s)",
            _op_interval(name, lambda o: o.span_mean_seconds_ci, fmt_seconds),
            str,
        ),
        Row(
            f"{name} span throughput ({rate.name}/s)",
            _op(name, lambda o: o.span_throughput_bytes_per_second),
            fmt_in(rate, 3),
        ),
        Row(
            f"{name} span throughput {CI} ({rate.name}/s)",
            _op_interval(name, lambda o: o.span_throughput_bytes_per_second_ci, fmt_in(rate, 3)),
            str,
        ),
        Row(
            f"{name} median per-rank ({rate.name}/s)",
            _op(name, lambda o: o.median_rank_throughput_bytes_per_second),
            fmt_in(rate, 3),
        ),
    ]


def _stored(
    get: Callable[[figures.StoredFigures], float | int | None],
) -> Callable[[RunSummary], float | int | None]:
    """A figure of the first timed checkpoint as storage holds it (rank 0 listed it)."""

    def value(s: RunSummary) -> float | int | None:
        stored = figures.stored_figures(s)
        return None if stored is None else get(stored)

    return value


def _stored_rows(size: Unit) -> list[Row]:
    """What storage holds beside the payload: per-item torch.save overhead and ``.metadata``."""
    return [
        Row(f"stored size ({size.name})", _stored(lambda f: f.stored_bytes), fmt_in(size, 2)),
        Row("stored / payload", _stored(lambda f: f.stored_per_payload), lambda x: f"{x:.4f}"),
        Row("stored objects", _stored(lambda f: f.objects), fmt_int),
        Row(".metadata (MiB)", _stored(lambda f: f.metadata_bytes), fmt_in(MIB_UNIT, 3)),
    ]


def _resharded(s: RunSummary) -> bool:
    return s.load_shard_bytes is not None and s.load_shard_bytes != s.shard_bytes


ASYNC_FIGURES = ("stall", "staging", "background")


def _spread(name: str, get: Callable[[RankSpread], float]) -> Callable[[RunSummary], float | None]:
    def value(s: RunSummary) -> float | None:
        spread: RankSpread | None = getattr(s.save, name) if s.save is not None else None
        return None if spread is None else get(spread)

    return value


def _async_rows(runs: Sequence[RunSummary]) -> list[Row]:
    """An async save's stall, staging and background rows, for the figures some run measured."""
    rows = []
    for name in ASYNC_FIGURES:
        if not any(s.save is not None and getattr(s.save, name) is not None for s in runs):
            continue
        rows += [
            Row(
                f"save {name} mean (s)",
                _spread(name, lambda r: r.mean_seconds),
                fmt_seconds,
                ratio=True,
            ),
            Row(
                f"save {name} slowest rank (s)",
                _spread(name, lambda r: r.slowest_rank_seconds),
                fmt_seconds,
            ),
        ]
    return rows


def _train(get: Callable[[TrainSummary], float | int | None]) -> Callable[[RunSummary], Any]:
    return lambda s: None if s.train is None else get(s.train)


def _cores(t: TrainSummary) -> str:
    return f"{t.step_threads} of {t.cpus}"


def _train_rows(runs: Sequence[RunSummary]) -> list[Row]:
    """The training step beside the saves, for runs that ran it (docs/measurement.md)."""
    if not any(s.train is not None for s in runs):
        return []

    def ms(x: float) -> str:
        return f"{1000 * x:.2f}"

    return [
        Row("train steps per save (K)", _train(lambda t: t.every), fmt_int),
        Row("train matrix side", _train(lambda t: t.matrix), fmt_int),
        Row("train step threads of CPUs", lambda s: _cores(s.train) if s.train else None, str),
        Row("train step (ms)", _train(lambda t: t.step_seconds), ms, ratio=True),
        Row(
            "train step, save in flight (ms)",
            _train(lambda t: t.in_flight_step_seconds),
            ms,
            ratio=True,
        ),
        Row(
            "train wait for previous (s)",
            _train(lambda t: t.wait.slowest_rank_seconds),
            fmt_seconds,
        ),
        Row(
            "train stall (s)",
            _train(lambda t: t.stall.slowest_rank_seconds),
            fmt_seconds,
            ratio=True,
        ),
        Row(
            "train overhead per interval (%)",
            _train(lambda t: t.overhead),
            lambda x: f"{100 * x:.2f}",
            ratio=True,
        ),
    ]


def _memory_rows(runs: Sequence[RunSummary]) -> list[Row]:
    rows = []
    if any(s.peak_rss_bytes is not None for s in runs):
        rows.append(Row("peak RSS, rank (MiB)", lambda s: s.peak_rss_bytes, fmt_in(MIB_UNIT, 0)))
    if any(s.checkpointer_peak_rss_bytes is not None for s in runs):
        rows.append(
            Row(
                "peak RSS, checkpointer (MiB)",
                lambda s: s.checkpointer_peak_rss_bytes,
                fmt_in(MIB_UNIT, 0),
            )
        )
    return rows


def _verified(s: RunSummary) -> str:
    if s.verified is None:
        return "not checked" if s.succeeded else "unknown"
    return "yes" if s.verified else "NO"


def _status(s: RunSummary) -> str:
    return "ok" if s.succeeded else "FAILED"


def rows_for(runs: Sequence[RunSummary]) -> list[Row]:
    """The table's rows; the async save row appears only when some run measured it."""
    size = unit_for([s.total_bytes for s in runs])
    rate = unit_for(
        [op.throughput_bytes_per_second for s in runs for op in (s.save, s.load) if op is not None]
    )
    rows = [
        Row("world size", lambda s: s.world_size, fmt_int),
        Row("ranks reported", lambda s: f"{s.ranks_reported}/{s.world_size}", str),
        # No rank reported: the shard size is unknown, not zero.
        Row(
            f"shard size ({size.name})",
            lambda s: s.shard_bytes if s.ranks_reported else None,
            fmt_in(size, 2),
        ),
        Row(f"total size ({size.name})", lambda s: s.total_bytes, fmt_in(size, 2)),
    ]
    if any(_resharded(s) for s in runs):
        rows.append(
            Row(f"load shard size ({size.name})", lambda s: s.load_shard_bytes, fmt_in(size, 2))
        )
    if any(figures.stored_figures(s) is not None for s in runs):
        rows += _stored_rows(size)
    procedures = {s.procedure for s in runs}
    rows.append(Row("procedure", lambda s: s.procedure.value, str))
    if any(s.cache is not None for s in runs):
        rows.append(Row("page cache", lambda s: s.cache.value if s.cache else None, str))
    for name in ("save", "load"):
        op_rows = _rows(name, rate, _OP_ROWS)
        if any((op := getattr(s, name)) is not None and op.ranks_left_out for s in runs):
            at = next(i for i, r in enumerate(op_rows) if r.label.endswith(" slowest rank"))
            op_rows[at + 1 : at + 1] = _rows(name, rate, [_LEFT_OUT_ROW])
        _add_p99(op_rows, name, runs, rate)
        if name == "save":
            op_rows[2:2] = _async_rows(runs)
        if Procedure.REFERENCE in procedures:
            op_rows += _rows(name, rate, _REFERENCE_ROWS)
        if Procedure.MLPERF in procedures:
            op_rows += _mlperf_rows(name, rate)
        rows += op_rows
    if any(s.load is not None and s.load.read_amplification is not None for s in runs):
        rows += _READ_AMPLIFICATION_ROWS
    if any(s.delete is not None for s in runs):
        rows += _delete_rows(runs, rate)
    if any(s.resources is not None for s in runs):
        rows += _resource_rows(size)
    if any(s.mlperf_category is not None for s in runs):
        rows.append(Row("MLPerf category", lambda s: s.mlperf_category, str))
    if any(s.ram_rule is not None for s in runs):
        rows.append(Row("3 x RAM rule", lambda s: s.ram_rule, str))
    rows += _train_rows(runs) + _memory_rows(runs)
    rows += [Row("verified", _verified, str), Row("status", _status, str)]
    return rows


# Bytes read from storage over the stored bytes the load plans needed (docs/measurement.md).
_READ_AMPLIFICATION_ROWS = [
    Row(
        "load read amplification",
        _op("load", lambda o: o.read_amplification),
        lambda x: f"{x:.4f}",
        ratio=True,
    ),
    Row(
        "load read amplification max rank",
        _op("load", lambda o: o.max_rank_read_amplification),
        lambda x: f"{x:.4f}",
    ),
]


def _resource(
    get: Callable[[ResourceSummary], float | int | None],
) -> Callable[[RunSummary], float | int | None]:
    def value(s: RunSummary) -> float | int | None:
        return None if s.resources is None else get(s.resources)

    return value


def _resource_rows(size: Unit) -> list[Row]:
    """What the ranks' processes used while benchmarking: the largest per rank, traffic totals."""
    return [
        Row("rank CPU user max (s)", _resource(lambda r: r.max_cpu_user_seconds), fmt_seconds),
        Row("rank CPU system max (s)", _resource(lambda r: r.max_cpu_system_seconds), fmt_seconds),
        Row("rank peak RSS max (MiB)", _resource(lambda r: r.max_peak_rss_bytes),
            fmt_in(MIB_UNIT, 1)),
        Row(f"sent to storage ({size.name})", _resource(lambda r: r.sent_bytes), fmt_in(size, 2)),
        Row(f"received from storage ({size.name})", _resource(lambda r: r.received_bytes),
            fmt_in(size, 2)),
    ]  # fmt: skip


def _delete_rows(runs: Sequence[RunSummary], rate: Unit) -> list[Row]:
    """Deleting the checkpoint, timed as its own operation (absent when checkpoints are kept)."""
    rows = _rows("delete", rate, _DELETE_ROWS)
    _add_p99(rows, "delete", runs, rate)
    return rows


def _add_p99(rows: list[Row], name: str, runs: Sequence[RunSummary], rate: Unit) -> None:
    """The p99 row after p90, when some run has a p99 of the operation (enough samples)."""
    if any((op := getattr(s, name)) is not None and op.p99_seconds is not None for s in runs):
        at = next(i for i, r in enumerate(rows) if r.label.endswith(" p90 (s)"))
        rows[at + 1 : at + 1] = _rows(name, rate, [_P99_ROW])


def _cell(row: Row, s: RunSummary) -> str:
    v = row.value(s)
    if v is None:
        return MISSING
    if isinstance(v, str):
        return v
    return row.fmt(float(v))


def _ratio_cell(row: Row, a: RunSummary, b: RunSummary) -> str:
    if not row.ratio:
        return ""
    va, vb = row.value(a), row.value(b)
    if not isinstance(va, int | float) or not isinstance(vb, int | float) or vb == 0:
        return ""
    return fmt_ratio(float(va) / float(vb))


def axes_of(s: RunSummary) -> dict[str, str]:
    """The cell's value of each option given a list (as typed), recorded by the runner."""
    axes: Mapping[str, Any] = s.extra.get("axes", {})
    return {str(k): str(v) for k, v in axes.items()}


def best_cells(runs: Sequence[tuple[str, RunSummary]]) -> dict[str, intervals.Best]:
    """``{"save": ..., "load": ...}``: each operation's best succeeded cell by throughput, or the
    cells that cannot be told apart (:func:`intervals.best_of`)."""
    best: dict[str, intervals.Best] = {}
    for op in ("save", "load"):
        found = intervals.best_of(
            [
                (i, summary.throughput_bytes_per_second, summary.throughput_bytes_per_second_ci)
                for i, (_, s) in enumerate(runs)
                if s.succeeded and (summary := getattr(s, op)) is not None
            ]
        )
        if found is not None:
            best[op] = found
    return best


def best_text(best: intervals.Best, op: str, labels: Sequence[str]) -> str:
    """One line: the best cell, or which cells cannot be told apart, and by what."""
    if best.winner is not None:
        return f"best {op}: {labels[best.winner]} (its {CI} is above every other cell's)"
    tied = ", ".join(labels[i] for i in best.tied)
    return f"best {op}: {INDISTINGUISHABLE} among {tied} ({CI}s overlap, or n/a with one sample)"


def best_lines(runs: Sequence[tuple[str, RunSummary]], labels: Sequence[str]) -> list[str]:
    """Under the table: each operation's best cell, or the cells it cannot be told from."""
    if sum(1 for _, s in runs if s.succeeded) < 2:
        return []
    best = best_cells(runs)
    return [best_text(b, op, labels) for op, b in best.items()]


def _best_row(runs: Sequence[tuple[str, RunSummary]]) -> list[str] | None:
    if sum(1 for _, s in runs if s.succeeded) < 2:
        return None
    best = best_cells(runs)

    def mark(i: int) -> str:
        marks = []
        for op in ("save", "load"):
            b = best.get(op)
            if b is not None and b.winner == i:
                marks.append(op)
            elif b is not None and i in b.tied:
                marks.append(f"({op})")  # one of the cells that cannot be told apart
        return ",".join(marks)

    return ["best (throughput)", *(mark(i) for i in range(len(runs)))]


def format_table(runs: Sequence[tuple[str, RunSummary]]) -> str:
    """Runs side by side: one column per cell, plus ``gcs/gcsfs`` (or ``s3/s3fs``) when both
    are there."""
    if not runs:
        raise ValueError("format_table: no runs to show")
    labels = [label for label, _ in runs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"format_table: cell labels must be unique, got {labels}")
    summaries = [s for _, s in runs]
    by_label = dict(runs)
    names = next((p for p in RATIO_PAIRS if p[0] in by_label and p[1] in by_label), RATIO_PAIRS[0])
    pair = (by_label.get(names[0]), by_label.get(names[1]))
    varied = list(dict.fromkeys(k for s in summaries for k in axes_of(s)))
    body: list[list[str]] = []
    if any(k != "backend" for k in varied):
        header = ["", *(f"cell {i}/{len(runs)}" for i in range(1, len(runs) + 1))]
        body += [[k, *(axes_of(s).get(k, MISSING) for s in summaries)] for k in varied]
    else:
        header = ["", *labels]
    if pair[0] is not None and pair[1] is not None:
        header.append("/".join(names))
    for row in rows_for(summaries):
        line = [row.label, *(_cell(row, s) for s in summaries)]
        if pair[0] is not None and pair[1] is not None:
            line.append(_ratio_cell(row, pair[0], pair[1]))
        body.append(line)
    best = _best_row(runs)
    if best is not None:
        body.append(best)
    table = align([header, *(line + [""] * (len(header) - len(line)) for line in body)])
    notes = best_lines(runs, header[1 : len(runs) + 1])
    return "\n".join([table, *notes])


def align(lines: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = []
    for line in lines:
        first = line[0].ljust(widths[0])
        rest = [cell.rjust(w) for cell, w in zip(line[1:], widths[1:], strict=True)]
        out.append("  ".join([first, *rest]).rstrip())
    return "\n".join(out)


def failure_lines(label: str, s: RunSummary) -> list[str]:
    """Why a run failed: each rank's own error, then the ranks that never reported."""
    lines = [f"{label}: rank {e.rank}{_on(e.host)} failed: {e.error}" for e in s.errors]
    if s.error_count > len(s.errors):
        lines.append(f"{label}: ... and {s.error_count - len(s.errors)} more failed ranks")
    if s.missing_rank_count:
        # The local runner knows why a rank is silent (its exit status); the operator may not.
        why: Mapping[str, Any] = s.extra.get("missing_why", {})
        for rank in s.missing_ranks:
            reason = why.get(str(rank))
            lines.append(
                f"{label}: rank {rank} did not report" + (f" ({reason})" if reason else "")
            )
        more = s.missing_rank_count - len(s.missing_ranks)
        if more > 0:
            lines.append(f"{label}: ... and {more} more ranks did not report")
    if s.verified is False:
        lines.append(f"{label}: a loaded checkpoint did not verify")
    if not lines and not s.succeeded:
        missing = [op for op in ("save", "load") if getattr(s, op) is None]
        lines.append(f"{label}: no {' or '.join(missing) or 'result'} timings were reported")
    return lines


def _on(host: str) -> str:
    return f" on {host}" if host else ""


def format_context(runs: Sequence[tuple[str, RunSummary]]) -> str:
    """What the figures depend on, taken from the first run's ``extra`` (same machine for all)."""
    if not runs:
        return ""
    extra: Mapping[str, Any] = runs[0][1].extra
    versions: Mapping[str, Any] = extra.get("versions", {})
    parts = [f"{name} {ver}" for name, ver in versions.items()]
    host = extra.get("node")
    cpus = extra.get("cpu_count")
    where = ", ".join(
        p for p in (f"node {host}" if host else "", f"{cpus} CPUs" if cpus else "") if p
    )
    lines = []
    if where:
        lines.append(where)
    if parts:
        lines.append("versions: " + ", ".join(parts))
    for label, s in runs:
        settings: Mapping[str, Any] = s.extra.get("settings", {})
        if settings:
            text = ", ".join(f"{k}={v}" for k, v in settings.items())
            lines.append(f"{label}: {text}")
        for name, op in (("save", s.save), ("load", s.load)):
            if op is not None and op.rank_io_seconds and len(op.rank_io_seconds) <= _RANKS_SHOWN:
                shown = ", ".join(f"{x:.3f}" for x in op.rank_io_seconds)
                lines.append(f"{label}: {name} I/O seconds by rank: {shown}")
        if s.mlperf_open_reasons:
            lines.append(f"{label}: MLPerf OPEN: " + "; ".join(s.mlperf_open_reasons))
        if s.ram_rule is not None and s.ram_rule_memory_bytes:
            lines.append(
                f"{label}: 3 x RAM rule {s.ram_rule}: a node wrote "
                f"{(s.ram_rule_written_bytes or 0) / GIB:.2f} GiB against "
                f"3 x {s.ram_rule_memory_bytes / GIB:.2f} GiB of RAM"
            )
    return "\n".join(lines)


_RANKS_SHOWN = 16


def format_report(runs: Sequence[tuple[str, RunSummary]]) -> str:
    """The table, then context, then one line per failure (if any)."""
    parts = [format_table(runs)]
    context = format_context(runs)
    if context:
        parts.append(context)
    failures = [line for label, s in runs for line in failure_lines(label, s)]
    if failures:
        parts.append("\n".join(failures))
    return "\n\n".join(parts)
