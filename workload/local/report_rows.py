"""The table's rows: what each row shows, for each family of figures, and how its numbers read.

One :class:`Row` per figure, read from a :class:`RunSummary` (computed in
:mod:`~ckptbench.workload.contract.results.figures`, never here): sizes and the procedure, each
operation's timings and throughput with their intervals, the async save's stall, staging and
background, the reference's and MLPerf Storage's figures, read amplification, deletes, the
processes' resources, MLPerf's rules, the training step and memory. :func:`rows_for` picks the
families some run measured. Units are 1024-based (GiB, GiB/s); a table of only small figures
switches to MiB (MiB/s) so that they do not all read 0.00.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
CI = f"{round(intervals.CONFIDENCE * 100)}% CI"


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
    # Inside the I/O: the coordinator's .metadata, or format safetensors' consolidation.
    _Figure("finish (s)", lambda o: o.finish_mean_seconds or 0.0, "seconds"),
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
    peak = _resource(lambda r: r.max_peak_rss_bytes)
    if any(peak(s) is not None for s in runs):
        rows.append(Row("peak RSS, rank (MiB)", peak, fmt_in(MIB_UNIT, 0)))
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
        Row("ranks reported", lambda s: f"{s.ranks_reported}/{s.rank_count}", str),
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
        _add_per_sample(op_rows, name, runs)
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
        Row(f"sent to storage ({size.name})", _resource(lambda r: r.sent_bytes), fmt_in(size, 2)),
        Row(f"received from storage ({size.name})", _resource(lambda r: r.received_bytes),
            fmt_in(size, 2)),
    ]  # fmt: skip


def _delete_rows(runs: Sequence[RunSummary], rate: Unit) -> list[Row]:
    """Deleting the checkpoint, timed as its own operation (absent when checkpoints are kept)."""
    rows = _rows("delete", rate, _DELETE_ROWS)
    _add_p99(rows, "delete", runs, rate)
    _add_per_sample(rows, "delete", runs)
    return rows


def _add_per_sample(rows: list[Row], name: str, runs: Sequence[RunSummary]) -> None:
    """After samples: where the per-sample figures come from, when not the run's (said)."""
    if any((op := getattr(s, name)) is not None and op.per_sample != "run" for s in runs):
        at = next(i for i, r in enumerate(rows) if r.label.endswith(" samples")) + 1
        rows[at:at] = [Row(f"{name} per-sample from", _op(name, lambda o: o.per_sample), str)]


def _add_p99(rows: list[Row], name: str, runs: Sequence[RunSummary], rate: Unit) -> None:
    """The p99 row after p90, when some run has a p99 of the operation (enough samples)."""
    if any((op := getattr(s, name)) is not None and op.p99_seconds is not None for s in runs):
        at = next(i for i, r in enumerate(rows) if r.label.endswith(" p90 (s)"))
        rows[at + 1 : at + 1] = _rows(name, rate, [_P99_ROW])
