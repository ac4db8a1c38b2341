"""The table of one or more data-loading runs side by side: a pure function of their summaries.

One column per cell; with several, a ratio column against the first cell (its samples per second
and the other rates: above 1, faster than the first; on a seconds row below 1, quicker). When only
the accelerators vary, a last line gives MLPerf Storage's headline: the most accelerators whose
utilisation stayed at the floor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ckptbench.workload.contract.checkpoint.sizes import format_bytes
from ckptbench.workload.contract.data import figures
from ckptbench.workload.contract.data.figures import DataSummary
from ckptbench.workload.contract.results.summaries import Interval

MISSING = "-"


@dataclass(frozen=True)
class Run:
    label: str
    summary: DataSummary
    accelerators: int  # in the whole run
    varied: frozenset[str] = frozenset()  # the options given a list (without dashes)


# What an AU curve may vary: the number of accelerators, and nothing else.
CURVE_AXES = frozenset({"accelerators", "world-size"})


def _interval(i: Interval | None, fmt: Callable[[float], str]) -> str:
    if i is None:
        return ""
    high = "inf" if i.high is None else fmt(i.high)
    return f" [{fmt(i.low)}, {high}]"


def _num(fmt: str) -> Callable[[float], str]:
    return lambda v: format(v, fmt)


@dataclass(frozen=True)
class Row:
    name: str
    show: Callable[[DataSummary], str]
    value: Callable[[DataSummary], float | None] | None = None  # what a ratio divides


def _opt(v: float | None, fmt: Callable[[float], str]) -> str:
    return MISSING if v is None else fmt(v)


def _au(s: DataSummary) -> str:
    if s.accelerator_utilization is None:
        return MISSING
    text = f"{s.accelerator_utilization:.1%}" + _interval(
        s.accelerator_utilization_interval, lambda v: f"{v:.1%}"
    )
    if s.au_passed is not None and s.au_floor is not None:
        text += f" {'pass' if s.au_passed else 'FAIL'} (floor {s.au_floor:.0%})"
    return text


def _seconds(v: float) -> str:
    return f"{v:.4f} s" if v < 1 else f"{v:.2f} s"


ROWS: tuple[Row, ...] = (
    Row(
        "samples/s",
        lambda s: (
            _opt(s.samples_per_second, _num(",.1f"))
            + _interval(s.samples_per_second_interval, _num(",.1f"))
        ),
        lambda s: s.samples_per_second,
    ),
    Row(
        "read rate",
        lambda s: _opt(s.bytes_per_second, lambda v: f"{format_bytes(int(v))}/s"),
        lambda s: s.bytes_per_second,
    ),
    Row(
        "egress", lambda s: _opt(s.egress_gbps, lambda v: f"{v:.3f} Gb/s"), lambda s: s.egress_gbps
    ),
    Row("accelerator utilisation", _au, lambda s: s.accelerator_utilization),
    Row("lowest accelerator", lambda s: _opt(s.accelerator_utilization_min, lambda v: f"{v:.1%}")),
    Row(
        "time to first batch",
        lambda s: _opt(s.first_batch_seconds, _seconds),
        lambda s: s.first_batch_seconds,
    ),
    Row(
        "batch wait p50",
        lambda s: _opt(s.batch_wait_p50_seconds, _seconds),
        lambda s: s.batch_wait_p50_seconds,
    ),
    Row(
        "batch wait p90",
        lambda s: _opt(s.batch_wait_p90_seconds, _seconds),
        lambda s: s.batch_wait_p90_seconds,
    ),
    Row(
        "batch wait p99",
        lambda s: _opt(s.batch_wait_p99_seconds, _seconds),
        lambda s: s.batch_wait_p99_seconds,
    ),
    Row("epochs", lambda s: ", ".join(_seconds(e) for e in s.epoch_seconds) or MISSING),
    Row("listing", lambda s: _opt(s.listing_seconds, _seconds)),
    Row(
        "prepare",
        lambda s: (
            "reused"
            if s.prepare_seconds is None and s.samples
            else _opt(s.prepare_seconds, _seconds)
        ),
    ),
    Row("samples read", lambda s: f"{s.samples:,} ({format_bytes(s.bytes)})"),
    Row("requests", lambda s: _opt(s.requests, lambda v: f"{int(v):,}")),
    Row(
        "retries", lambda s: ", ".join(f"{n}x {c}" for c, n in sorted(s.retries.items())) or "none"
    ),
    Row("worker peak RSS", lambda s: _opt(s.worker_peak_rss_bytes, lambda v: format_bytes(int(v)))),
    Row("verified", lambda s: "yes" if s.verified else "NO"),
)


def format_report(runs: Sequence[Run]) -> str:
    heads = [r.label for r in runs]
    table = [[row.name, *(row.show(r.summary) for r in runs)] for row in ROWS]
    if len(runs) > 1:
        heads.append(f"ratio to {runs[0].label}")
        for line, row in zip(table, ROWS, strict=True):
            line.append(_ratios(row, runs))
    for r in runs:
        for rank, error in sorted(r.summary.errors.items()):
            table.append([f"{r.label}: rank {rank}", error])
    widths = [
        max(len(x) for x in col)
        for col in zip(
            *([["", *heads]] + [line + [""] * (len(heads) + 1 - len(line)) for line in table]),
            strict=True,
        )
    ]
    lines = [_line(["", *heads], widths)]
    lines.append("  ".join("-" * w for w in widths))
    lines += [_line(line, widths) for line in table]
    headline = sustained_line(runs)
    if headline:
        lines += ["", headline]
    return "\n".join(lines)


def _ratios(row: Row, runs: Sequence[Run]) -> str:
    if row.value is None:
        return ""
    base = row.value(runs[0].summary)
    if not base:
        return ""
    out = []
    for r in runs[1:]:
        v = row.value(r.summary)
        out.append(MISSING if v is None else f"{v / base:.2f}x")
    return " ".join(out)


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    padded = [*cells, *[""] * (len(widths) - len(cells))]
    return "  ".join(c.ljust(w) for c, w in zip(padded, widths, strict=True)).rstrip()


def _curve_floor(runs: Sequence[Run]) -> float | None:
    """The runs' shared AU floor when they make an AU curve (only the accelerators vary)."""
    floors = {r.summary.au_floor for r in runs}
    varied = frozenset().union(*(r.varied for r in runs))
    if len(runs) < 2 or len(floors) != 1 or not varied <= CURVE_AXES:
        return None
    return floors.pop()


def sustained(runs: Sequence[Run]) -> int | None:
    """MLPerf Storage's headline over the runs' AU curve; None where they make no curve."""
    return figures.sustained_accelerators(
        [(r.accelerators, r.summary.accelerator_utilization) for r in runs], _curve_floor(runs)
    )


def sustained_line(runs: Sequence[Run]) -> str | None:
    floor = _curve_floor(runs)
    if floor is None:
        return None
    best = sustained(runs)
    if best is None:
        return f"no run kept accelerator utilisation at {floor:.0%}"
    return f"sustained: {best} accelerator(s) at utilisation >= {floor:.0%} (MLPerf Storage)"
