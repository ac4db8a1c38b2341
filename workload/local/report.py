"""The readable table of one or more runs, laid out: pure functions of :class:`RunSummary`, no I/O.

What each row shows, and in which unit, is :mod:`.report_rows`; here, the columns and the lines
around them. With several cells (runs) they are printed side by side, one column each, and when both
``gcs`` and ``gcsfs`` (or ``s3`` and ``s3fs``) are present a ratio column ``gcs/gcsfs``
(``s3/s3fs``) is added: above 1 on a throughput row means the first moved more bytes per second;
below 1 on a seconds row means it took less time.
When settings other than the backend vary, the columns are headed ``cell i/N`` and the first rows
give each cell's value of every varied option. Each mean carries its 95% confidence interval
(``n/a`` with one sample), computed in :mod:`~ckptbench.workload.contract.results.figures`. A
``best`` row names the cell with the highest save and load throughput among the cells that
succeeded, only where the intervals tell it apart from every other cell; otherwise the row says
``indistinguishable`` under the cells that cannot be told apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ckptbench.workload.contract.checkpoint.sizes import GIB
from ckptbench.workload.contract.results import intervals
from ckptbench.workload.contract.results.summaries import (
    RunSummary,
)
from ckptbench.workload.local.outputs.both_rows import both_rows
from ckptbench.workload.local.report_rows import (
    CI,
    MISSING,
    Row,
    fmt_ratio,
    rows_for,
)

INDISTINGUISHABLE = "indistinguishable"
# A backend and its baseline: the first pair whose two columns are both there gets a ratio column.
RATIO_PAIRS = (("gcs", "gcsfs"), ("s3", "s3fs"), ("dataflux", "gcsfs"))


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
    rows = rows_for(summaries)
    rows[-2:-2] = both_rows(summaries)  # before verified and status
    for row in rows:
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
    """Why a run failed: each rank's own error, then the ranks that never reported, then what
    its cleanup left behind."""
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
    if s.left is not None:
        lines.append(f"{label}: {s.left.notice()}")
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
