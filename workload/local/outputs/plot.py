"""``ckptbench report RESULTS.json... -o report.png|.svg|.html``: results drawn with matplotlib.

Several files are drawn as one: their cells side by side, each named ``A: label``, ``B: label``
(A the first file), as ``ckptbench compare`` letters them; the HTML form adds the comparison.

Up to three panels: save and load throughput per cell, each bar with its 95% confidence interval
(the best of each marked only where the intervals tell it apart; otherwise the panel names the
cells that cannot be told apart), save against load
throughput (one point per cell, with the line where they are equal), and throughput against world
size for cells that differ only in world size. When some cell saved async or ran a training step,
a second row: each cell's stall, staging and background, its overhead per checkpoint interval
against CheckFreq's 3.5%, and its step time without a checkpoint and with one in flight. A panel
is drawn only when the results hold what it draws (:data:`HAS_DATA`): no scaling panel for one
world size, no overhead or step-time panel without a training step. The
HTML form embeds the SVG beside the table. matplotlib is in the optional ``report`` extra;
without it the command says how to install it.
"""

from __future__ import annotations

import argparse
import html
import io
import string
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ckptbench.workload.contract.results.summaries import OpSummary, RunSummary
from ckptbench.workload.local import report, report_rows
from ckptbench.workload.local.outputs import command, compare
from ckptbench.workload.local.outputs.command import EXIT_FAILED, EXIT_OK, CommandError
from ckptbench.workload.local.outputs.document import Document, read_json

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.typing import HashableList

FORMATS = (".png", ".svg", ".html")
SAVE_COLOUR, LOAD_COLOUR = "#1f77b4", "#ff7f0e"
WORLD_SIZE_AXIS = "world-size"
MAX_FILES = compare.MAX_FILES


def _rate(s: RunSummary, op: str, unit: report_rows.Unit) -> float | None:
    summary: OpSummary | None = getattr(s, op)
    if summary is None or not s.succeeded:
        return None
    return summary.throughput_bytes_per_second / unit.scale


def _errors(
    s: RunSummary, op: str, unit: report_rows.Unit, cap: float
) -> tuple[float, float] | None:
    """(below, above) the bar: its throughput interval in ``unit``; unbounded reaches ``cap``."""
    summary: OpSummary | None = getattr(s, op)
    rate = _rate(s, op, unit)
    if summary is None or rate is None or summary.throughput_bytes_per_second_ci is None:
        return None
    ci = summary.throughput_bytes_per_second_ci
    high = cap if ci.high is None else ci.high / unit.scale
    return max(0.0, rate - ci.low / unit.scale), max(0.0, high - rate)


def _short(label: str, index: int) -> str:
    return f"{index + 1}: {label}"


def _per_cell(ax: Axes, doc: Document, unit: report_rows.Unit) -> None:
    runs = doc.runs
    best = report.best_cells(runs)
    width = 0.38
    xs = list(range(len(runs)))
    finite = [
        x / unit.scale
        for _, s in runs
        for op in (s.save, s.load)
        if op is not None and s.succeeded
        for x in (
            op.throughput_bytes_per_second,
            *(
                [op.throughput_bytes_per_second_ci.high]
                if op.throughput_bytes_per_second_ci is not None
                and op.throughput_bytes_per_second_ci.high is not None
                else []
            ),
        )
    ]
    cap = 1.15 * max(finite, default=1.0)
    for offset, op, colour in ((-width / 2, "save", SAVE_COLOUR), (width / 2, "load", LOAD_COLOUR)):
        values = [_rate(s, op, unit) for _, s in runs]
        errors = [_errors(s, op, unit, cap) for _, s in runs]
        bars = ax.bar(
            [x + offset for x in xs],
            [v or 0.0 for v in values],
            width,
            label=op,
            color=colour,
            yerr=[[e[0] if e else 0.0 for e in errors], [e[1] if e else 0.0 for e in errors]],
            capsize=3,
        )
        found = best.get(op)
        if found is not None and found.winner is not None:
            bar = bars[found.winner]
            whisker = errors[found.winner]
            ax.annotate(
                f"best {op}",
                # Above the interval's upper whisker, where it does not cross the bar's.
                (bar.get_x() + bar.get_width() / 2, bar.get_height() + (whisker or (0, 0))[1]),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    ticks = [
        _short(label, i) + ("" if s.succeeded else "\n(failed)")
        for i, (label, s) in enumerate(runs)
    ]
    ax.set_xticks(
        xs,
        ticks,
        rotation=30 if len(runs) > 3 else 0,
        ha="right" if len(runs) > 3 else "center",
        fontsize=8,
    )
    ax.set_ylabel(f"throughput ({unit.name}/s)")
    numbers = [str(i + 1) for i in range(len(runs))]
    ties = [
        report.best_text(found, op, numbers)
        for op in ("save", "load")
        if (found := best.get(op)) is not None and found.winner is None and len(runs) > 1
    ]
    ax.set_title("\n".join([f"Throughput per cell ({report_rows.CI} bars)", *ties]), fontsize=9)
    ax.legend()


def _save_vs_load(ax: Axes, doc: Document, unit: report_rows.Unit) -> None:
    top = 0.0
    for i, (_label, s) in enumerate(doc.runs):
        save, load = _rate(s, "save", unit), _rate(s, "load", unit)
        if save is None or load is None:
            continue
        ax.scatter([save], [load], color="#444444")
        ax.annotate(str(i + 1), (save, load), textcoords="offset points", xytext=(4, 4), fontsize=8)
        top = max(top, save, load)
    if top > 0:
        ax.plot([0, top * 1.1], [0, top * 1.1], linestyle=":", color="#999999", label="load = save")
        ax.set_xlim(0, top * 1.1)
        ax.set_ylim(0, top * 1.1)
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel(f"save ({unit.name}/s)")
    ax.set_ylabel(f"load ({unit.name}/s)")
    ax.set_title("Save vs load (points: cell numbers)")


def scaling_groups(
    runs: Sequence[tuple[str, RunSummary]],
) -> dict[str, list[tuple[int, RunSummary]]]:
    """Cells that differ only in world size, keyed by their other varied settings."""
    groups: dict[str, list[tuple[int, RunSummary]]] = {}
    for _, s in runs:
        axes = report.axes_of(s)
        key = " ".join(f"{k}={v}" for k, v in axes.items() if k != WORLD_SIZE_AXIS) or "all"
        groups.setdefault(key, []).append((s.world_size, s))
    return {k: sorted(v, key=lambda t: t[0]) for k, v in groups.items()}


def _scaling(ax: Axes, doc: Document, unit: report_rows.Unit) -> None:
    ax.set_title("Scaling with world size")
    ax.set_xlabel("world size (ranks)")
    ax.set_ylabel(f"throughput ({unit.name}/s)")
    sizes = {s.world_size for _, s in doc.runs}
    for key, cells in scaling_groups(doc.runs).items():
        for op, colour, style in (("save", SAVE_COLOUR, "-"), ("load", LOAD_COLOUR, "--")):
            points = [(n, v) for n, s in cells if (v := _rate(s, op, unit)) is not None]
            if points:
                ax.plot(
                    [n for n, _ in points],
                    [v for _, v in points],
                    linestyle=style,
                    marker="o",
                    color=colour if key == "all" else None,
                    label=f"{op} {key}" if key != "all" else op,
                )
    ax.set_xticks(sorted(sizes))
    ax.legend(fontsize=7)


CHECKFREQ_BAR = 0.035  # CheckFreq (FAST '21): checkpoint overhead within 3.5% of training time
COST_FIGURES = (("stall", "#d62728"), ("staging", "#9467bd"), ("background", "#2ca02c"))


def has_costs(doc: Document) -> bool:
    """Whether some cell saved async or ran a training step: the second row of plots."""
    return any(
        s.train is not None or (s.save is not None and s.save.stall is not None)
        for _, s in doc.runs
    )


def _cell_ticks(ax: Axes, doc: Document, *, numbers: bool = False) -> None:
    """Cells on the x axis: their labels, or (narrow panels) their numbers only."""
    xs = list(range(len(doc.runs)))
    many = len(doc.runs) > 3 and not numbers
    ax.set_xticks(
        xs,
        [str(i + 1) if numbers else _short(label, i) for i, (label, _) in enumerate(doc.runs)],
        rotation=30 if many else 0,
        ha="right" if many else "center",
        fontsize=8,
    )


def _save_costs(ax: Axes, doc: Document) -> None:
    """Per cell, the async save's stall, staging and background (slowest rank's means); a sync
    save's whole duration is its stall."""
    width = 0.8 / len(COST_FIGURES)
    for k, (name, colour) in enumerate(COST_FIGURES):
        values = []
        for _, s in doc.runs:
            spread = getattr(s.save, name) if s.save is not None else None
            if spread is not None:
                values.append(spread.slowest_rank_seconds)
            elif name == "stall" and s.save is not None and s.save.stall is None:
                values.append(s.save.mean_seconds)  # sync: the caller waits for all of it
            else:
                values.append(0.0)
        offset = (k - (len(COST_FIGURES) - 1) / 2) * width
        ax.bar([x + offset for x in range(len(values))], values, width, label=name, color=colour)
    _cell_ticks(ax, doc)
    ax.set_ylabel("seconds (slowest rank)")
    ax.set_title("What a save costs the caller (sync: the whole save is the stall)")
    ax.legend(fontsize=8)


def _overhead(ax: Axes, doc: Document) -> None:
    values = [s.train.overhead if s.train is not None else 0.0 for _, s in doc.runs]
    ax.bar(range(len(values)), [100 * v for v in values], color="#8c564b")
    ax.axhline(100 * CHECKFREQ_BAR, linestyle=":", color="#444444", label="CheckFreq's 3.5%")
    _cell_ticks(ax, doc, numbers=True)
    ax.set_ylabel("% of the interval's compute")
    ax.set_title("Overhead per checkpoint interval")
    ax.legend(fontsize=8)


def _step_times(ax: Axes, doc: Document) -> None:
    width = 0.38
    trains = [s.train for _, s in doc.runs]
    for offset, label, colour, values in (
        (-width / 2, "no checkpoint", "#7f7f7f", [t.step_seconds if t else 0.0 for t in trains]),
        (
            width / 2,
            "save in flight",
            "#e377c2",
            [(t.in_flight_step_seconds or 0.0) if t else 0.0 for t in trains],
        ),
    ):
        values = [1000 * v for v in values]
        ax.bar([x + offset for x in range(len(values))], values, width, label=label, color=colour)
    _cell_ticks(ax, doc, numbers=True)
    ax.set_ylabel("step time (ms)")
    ax.set_title("Training step beside the saves")
    ax.legend(fontsize=8)


# Whether the results hold what each panel draws: a panel without it would be empty axes.
def _measured(s: RunSummary) -> bool:
    return s.succeeded and (s.save is not None or s.load is not None)


HAS_DATA: dict[str, Callable[[Document], bool]] = {
    # Every cell has a bar or its "(failed)" tick.
    "per cell": lambda doc: True,
    "save vs load": lambda doc: any(
        s.succeeded and s.save is not None and s.load is not None for _, s in doc.runs
    ),
    "scaling": lambda doc: len({s.world_size for _, s in doc.runs if _measured(s)}) >= 2,
    "save costs": lambda doc: has_costs(doc) and any(s.save is not None for _, s in doc.runs),
    "overhead": lambda doc: any(s.train is not None for _, s in doc.runs),
    "step times": lambda doc: any(s.train is not None for _, s in doc.runs),
}
# The grid, four columns a row: each row's panels in order, the first widened over what the
# others leave (it carries a label per cell).
ROWS = (("per cell", "save vs load", "scaling"), ("save costs", "overhead", "step times"))
COLUMNS = 4


def panel_rows(doc: Document) -> list[list[str]]:
    """The panels ``doc`` has data for, row by row; a row with none is left out."""
    rows = [[name for name in row if HAS_DATA[name](doc)] for row in ROWS]
    return [row for row in rows if row]


def _mosaic(rows: Sequence[Sequence[str]]) -> list[HashableList[str]]:
    mosaic: list[HashableList[str]] = []
    for row in rows:
        cells: HashableList[str] = [row[0]] * (COLUMNS - len(row) + 1)
        cells += row[1:]
        mosaic.append(cells)
    return mosaic


def draw(doc: Document) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise RuntimeError(
            "ckptbench report needs matplotlib: pip install 'ckptbench[report]'"
        ) from None
    unit = report_rows.unit_for(
        [op.throughput_bytes_per_second for _, s in doc.runs for op in (s.save, s.load) if op]
    )
    rows = panel_rows(doc)
    fig = Figure(figsize=(15, 5 * len(rows)), layout="constrained")
    axes = fig.subplot_mosaic(_mosaic(rows))
    drawers: dict[str, Callable[[Axes], None]] = {
        "per cell": lambda ax: _per_cell(ax, doc, unit),
        "save vs load": lambda ax: _save_vs_load(ax, doc, unit),
        "scaling": lambda ax: _scaling(ax, doc, unit),
        "save costs": lambda ax: _save_costs(ax, doc),
        "overhead": lambda ax: _overhead(ax, doc),
        "step times": lambda ax: _step_times(ax, doc),
    }
    for row in rows:
        for name in row:
            drawers[name](axes[name])
    fig.suptitle(f"ckptbench: {doc.name}, {len(doc.runs)} cells")
    return fig


def merge(docs: Sequence[Document]) -> Document:
    """One file as it is; several as one document, each cell's label led by its file's letter."""
    if len(docs) == 1:
        return docs[0]
    letters = string.ascii_uppercase
    runs = [
        (f"{letter}: {label}", s)
        for letter, d in zip(letters, docs, strict=False)
        for label, s in d.runs
    ]
    return Document(
        path=Path(" + ".join(d.name for d in docs)),
        succeeded=all(d.succeeded for d in docs),
        runs=runs,
    )


def render(docs: Sequence[Document], suffix: str) -> bytes:
    doc = merge(docs)
    fig = draw(doc)
    buffer = io.BytesIO()
    if suffix == ".png":
        fig.savefig(buffer, format="png", dpi=100)
        return buffer.getvalue()
    fig.savefig(buffer, format="svg")
    if suffix == ".svg":
        return buffer.getvalue()
    svg = buffer.getvalue().decode()
    svg = svg[svg.index("<svg") :]  # drop the XML prolog: it may not appear inside HTML
    table = html.escape(report.format_report(doc.runs))
    if len(docs) > 1:
        legend = "\n".join(
            f"{letter} = {d.path}" for letter, d in zip(string.ascii_uppercase, docs, strict=False)
        )
        table = html.escape(f"{legend}\n\n{compare.format_comparison(docs)}") + "\n\n" + table
    page = (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>ckptbench: {html.escape(doc.name)}</title></head><body>\n"
        f"<h1>ckptbench: {html.escape(doc.name)}</h1>\n{svg}\n<pre>{table}</pre>\n</body></html>\n"
    )
    return page.encode()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ckptbench report",
        description="Draw one or more 'ckptbench run --json' results files as PNG, SVG or HTML "
        "(by -o); several are drawn side by side, lettered A, B, ... as 'ckptbench compare' "
        "letters them.",
    )
    p.add_argument("results", type=Path, nargs="+", metavar="RESULTS.json")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FILE")
    return p


def main(argv: Sequence[str]) -> int:
    return command.run(build_parser(), argv, _report)


def _report(args: argparse.Namespace) -> int:
    out: Path = args.output
    suffix = out.suffix.lower()
    if suffix not in FORMATS:
        raise CommandError(
            f"-o: unknown format {out.suffix or '(none)'!r} (use {', '.join(FORMATS)})"
        )
    files: list[Path] = args.results
    if len(files) > MAX_FILES:
        raise CommandError(f"give 1 to {MAX_FILES} results files, got {len(files)}")
    docs = [read_json(f) for f in files]
    try:
        data = render(docs, suffix)
    except RuntimeError as exc:
        raise CommandError(str(exc), EXIT_FAILED) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    print(f"ckptbench report: wrote {out}", file=sys.stderr)
    return EXIT_OK
