"""``ckptbench compare A.json B.json ...``: the cells of several results files side by side.

Cells are matched by their label (``gcs``, ``gcs threads=16``, ...). The first file is the
baseline: each later file gets a ratio column against it. On a throughput row a ratio above 1 means
that file moved more bytes per second; on a seconds row, below 1 means it took less time.
"""

from __future__ import annotations

import argparse
import string
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ckptbench.workload.contract.results import OpSummary, RunSummary
from ckptbench.workload.local import report
from ckptbench.workload.local.outputs import command
from ckptbench.workload.local.outputs.command import EXIT_FAILED, EXIT_OK, CommandError
from ckptbench.workload.local.outputs.document import Document, read_json

MAX_FILES = len(string.ascii_uppercase)

Figure = Callable[[RunSummary], float | None]


def _op(name: str, get: Callable[[OpSummary], float]) -> Figure:
    def value(s: RunSummary) -> float | None:
        op: OpSummary | None = getattr(s, name)
        return None if op is None else get(op)

    return value


def _figures(rate: report.Unit) -> list[tuple[str, Figure, Callable[[float], str]]]:
    per_s = report.fmt_in(rate, 3)
    return [
        (
            f"save throughput ({rate.name}/s)",
            _op("save", lambda o: o.throughput_bytes_per_second),
            per_s,
        ),
        (
            f"load throughput ({rate.name}/s)",
            _op("load", lambda o: o.throughput_bytes_per_second),
            per_s,
        ),
        ("save mean (s)", _op("save", lambda o: o.mean_seconds), report.fmt_seconds),
        ("load mean (s)", _op("load", lambda o: o.mean_seconds), report.fmt_seconds),
    ]


def _differences(label: str, docs: Sequence[Document], letters: str) -> list[str]:
    """What makes a cell's figures not comparable across files: a different size or rank count."""
    notes = []
    cells = [(letter, dict(d.runs).get(label)) for letter, d in zip(letters, docs, strict=False)]
    present = [(letter, s) for letter, s in cells if s is not None]
    for what, field in (("world size", "world_size"), ("total bytes", "total_bytes")):
        values = {getattr(s, field) for _, s in present}
        if len(values) > 1:
            each = ", ".join(f"{letter} {getattr(s, field)}" for letter, s in present)
            notes.append(f"note: {label}: {what} differs ({each})")
    return notes


def format_comparison(docs: Sequence[Document]) -> str:
    if len(docs) < 2:
        raise ValueError("compare: needs at least two results files")
    letters = string.ascii_uppercase[: len(docs)]
    labels = list(dict.fromkeys(label for d in docs for label, _ in d.runs))
    every = [s for d in docs for _, s in d.runs]
    rate = report.unit_for(
        [op.throughput_bytes_per_second for s in every for op in (s.save, s.load) if op is not None]
    )
    header = ["", *letters, *(f"{letter}/A" for letter in letters[1:])]
    lines: list[list[str]] = [header]
    for label in labels:
        cells = [dict(d.runs).get(label) for d in docs]
        lines.append([label] + [""] * (len(header) - 1))
        status = [
            report.MISSING if s is None else ("ok" if s.succeeded else "FAILED") for s in cells
        ]
        for name, get, fmt in _figures(rate):
            values = [None if s is None else get(s) for s in cells]
            shown = [report.MISSING if v is None else fmt(v) for v in values]
            base = values[0]
            ratios = [
                report.fmt_ratio(v / base) if v is not None and base else "" for v in values[1:]
            ]
            lines.append([f"  {name}", *shown, *ratios])
        lines.append(["  status", *status] + [""] * (len(docs) - 1))
    legend = [f"{letter} = {d.path}" for letter, d in zip(letters, docs, strict=True)]
    notes = [n for label in labels for n in _differences(label, docs, letters)]
    return "\n".join([report.align(lines), "", *legend, *(["", *notes] if notes else [])])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ckptbench compare",
        description="Print the cells of two or more 'ckptbench run --json' files side by side, "
        "with each file's ratio to the first.",
    )
    p.add_argument("files", nargs="+", type=Path, metavar="RESULTS.json")
    return p


def main(argv: Sequence[str]) -> int:
    return command.run(build_parser(), argv, _compare)


def _compare(args: argparse.Namespace) -> int:
    files: list[Path] = args.files
    if not 2 <= len(files) <= MAX_FILES:
        raise CommandError(f"give 2 to {MAX_FILES} results files, got {len(files)}")
    docs = [read_json(f) for f in files]
    shared = set.intersection(*({label for label, _ in d.runs} for d in docs))
    print(format_comparison(docs))
    if not shared:
        print(
            "ckptbench compare: no cell appears in every file; nothing to compare", file=sys.stderr
        )
        return EXIT_FAILED
    return EXIT_OK
