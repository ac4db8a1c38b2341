"""``ckptbench compare A.json B.json ...``: the cells of several results files side by side.

Cells are matched by the settings that vary within a file (a sweep's axes, the options given a
list: ``threads=4`` in one file lines up with ``threads=4`` in another, and with a single run whose
threads setting is 4); a setting the same in every cell of each file but different between files
(the backend of two single runs, ``file`` against ``gcs``) is what the files compare, and is named
under the table. Where the axes do not tell a file's cells apart (a file written without them),
cells are matched by their labels too. The first file is the baseline: each later file gets
a ratio column against it, with the ratio's 95% interval (the delta method,
docs/measurement.md#ratios-in-ckptbench-compare; n/a with one sample on either side). On a
throughput row a ratio above 1 means that file moved more bytes per second; on a seconds row,
below 1 means it took less time.
"""

from __future__ import annotations

import argparse
import re
import string
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ckptbench.workload.contract.results import intervals
from ckptbench.workload.contract.results.summaries import Interval, OpSummary, RunSummary
from ckptbench.workload.local import report, report_rows
from ckptbench.workload.local.options import OPTIONS
from ckptbench.workload.local.outputs import command
from ckptbench.workload.local.outputs.command import EXIT_FAILED, EXIT_OK, CommandError
from ckptbench.workload.local.outputs.document import Document, read_json

MAX_FILES = len(string.ascii_uppercase)
# Settings that name a run, not what it measured: never a reason for cells not to line up.
IDENTITY_SETTINGS = frozenset({"run_id"})
# An embedded emulator listens on a free loopback port, a new one each run: the port says
# nothing of what was measured, so http://127.0.0.1:41234 and :52843 are the same setting.
_LOOPBACK_PORT = re.compile(r"^(https?://(?:127\.0\.0\.1|localhost|\[::1\])):\d+(?=/|$)")
# Compared by the notes of their own (world size, total bytes): not repeated as settings.
_NOTED_SETTINGS = frozenset({"world_size"})

Key = tuple[tuple[str, str], ...]
# An axis is named by its option (``world-size``); the settings record its field (``world_size``).
FIELD_OF = {o.name: o.field for o in OPTIONS if o.field}
_LABEL = ""  # the key's entry for a cell's label, when settings cannot tell cells apart


class _Figure:
    """One row of each cell: its value, how it is shown, and the interval of a ratio of two."""

    def __init__(
        self,
        label: str,
        op: str,
        get: Callable[[OpSummary], float],
        fmt: Callable[[float], str],
        rate: bool,
    ) -> None:
        self.label, self.op, self.get, self.fmt, self.rate = label, op, get, fmt, rate

    def value(self, s: RunSummary) -> float | None:
        summary: OpSummary | None = getattr(s, self.op)
        return None if summary is None else self.get(summary)

    def ratio_interval(self, base: RunSummary, other: RunSummary) -> Interval | None:
        a: OpSummary | None = getattr(base, self.op)
        b: OpSummary | None = getattr(other, self.op)
        if a is None or b is None:
            return None
        if self.rate:
            return intervals.throughput_ratio_interval(a, base.total_bytes, b, other.total_bytes)
        return intervals.mean_ratio_interval(a, b)


def _figures(rate: report_rows.Unit) -> list[_Figure]:
    per_s = report_rows.fmt_in(rate, 3)
    return [
        _Figure(
            f"save throughput ({rate.name}/s)",
            "save",
            lambda o: o.throughput_bytes_per_second,
            per_s,
            rate=True,
        ),
        _Figure(
            f"load throughput ({rate.name}/s)",
            "load",
            lambda o: o.throughput_bytes_per_second,
            per_s,
            rate=True,
        ),
        _Figure(
            "save mean (s)", "save", lambda o: o.mean_seconds, report_rows.fmt_seconds, rate=False
        ),
        _Figure(
            "load mean (s)", "load", lambda o: o.mean_seconds, report_rows.fmt_seconds, rate=False
        ),
    ]


def _settings(s: RunSummary) -> dict[str, Any]:
    settings: Mapping[str, Any] = s.extra.get("settings", {})
    return {
        str(k): _LOOPBACK_PORT.sub(r"\1", v) if isinstance(v, str) else v
        for k, v in settings.items()
        if k not in IDENTITY_SETTINGS
    }


def varied_settings(docs: Sequence[Document]) -> list[str]:
    """The options some file gave a list (its sweep's axes, recorded by the runner): what a cell
    is, within its file."""
    return list(dict.fromkeys(name for d in docs for _, s in d.runs for name in report.axes_of(s)))


def cell_key(s: RunSummary, varied: Sequence[str]) -> Key:
    """The cell's value of each varied option: as typed where its file varied it, otherwise the
    value its settings record (a file that ran one backend has no backend axis)."""
    axes = report.axes_of(s)
    settings = _settings(s)
    key = []
    for name in varied:
        value = axes.get(name)
        if value is None:
            recorded = settings.get(FIELD_OF.get(name, name))
            value = report_rows.MISSING if recorded is None else str(recorded)
        key.append((name, value))
    return tuple(key)


class _Group:
    """One cell as each file holds it (None where a file has no such cell)."""

    def __init__(self, key: Key, size: int) -> None:
        self.key = key
        self.cells: list[tuple[str, RunSummary] | None] = [None] * size

    @property
    def label(self) -> str:
        if self.key:
            return " ".join(v if k == _LABEL else f"{k}={v}" for k, v in self.key)
        labels = dict.fromkeys(c[0] for c in self.cells if c is not None)
        return " vs ".join(labels)

    @property
    def summaries(self) -> list[RunSummary | None]:
        return [None if c is None else c[1] for c in self.cells]


def match_cells(docs: Sequence[Document]) -> list[_Group]:
    """The files' cells lined up by :func:`varied_settings`, first seen first; by their labels
    too when those settings do not tell some file's cells apart (a file without settings)."""
    varied = varied_settings(docs)
    by_label = any(len({cell_key(s, varied) for _, s in d.runs}) < len(d.runs) for d in docs)
    groups: dict[Key, _Group] = {}
    for i, d in enumerate(docs):
        for label, s in d.runs:
            key = cell_key(s, varied)
            if by_label:
                key = ((_LABEL, label), *key)
            groups.setdefault(key, _Group(key, len(docs))).cells[i] = (label, s)
    return list(groups.values())


def _ratio(fig: _Figure, base: RunSummary | None, other: RunSummary | None) -> str:
    if base is None or other is None:
        return ""
    a, b = fig.value(base), fig.value(other)
    if a is None or b is None or not a:
        return ""
    ci = fig.ratio_interval(base, other)
    return f"{report_rows.fmt_ratio(b / a)} {report_rows.fmt_interval(ci, lambda x: f'{x:.2f}')}"


def _differences(group: _Group, letters: str) -> list[str]:
    """What the files' cells differ in: size, rank count, and every other setting."""
    notes = []
    present = [(letter, c[1]) for letter, c in zip(letters, group.cells, strict=True) if c]
    for what, field in (("world size", "world_size"), ("total bytes", "total_bytes")):
        values = {getattr(s, field) for _, s in present}
        if len(values) > 1:
            each = ", ".join(f"{letter} {getattr(s, field)}" for letter, s in present)
            notes.append(f"note: {group.label}: {what} differs ({each})")
    settings = [(letter, _settings(s)) for letter, s in present]
    names = dict.fromkeys(k for _, c in settings for k in c if k not in _NOTED_SETTINGS)
    differ = []
    for name in names:
        per_file = [(letter, c.get(name, report_rows.MISSING)) for letter, c in settings]
        if len({repr(v) for _, v in per_file}) > 1:
            differ.append(f"{name} ({', '.join(f'{letter} {v}' for letter, v in per_file)})")
    if len(present) > 1 and differ:
        notes.append(f"note: {group.label}: settings differ: {'; '.join(differ)}")
    return notes


def format_comparison(docs: Sequence[Document]) -> str:
    if len(docs) < 2:
        raise ValueError("compare: needs at least two results files")
    letters = string.ascii_uppercase[: len(docs)]
    groups = match_cells(docs)
    every = [s for d in docs for _, s in d.runs]
    rate = report_rows.unit_for(
        [op.throughput_bytes_per_second for s in every for op in (s.save, s.load) if op is not None]
    )
    header = ["", *letters, *(f"{letter}/A ({report_rows.CI})" for letter in letters[1:])]
    lines: list[list[str]] = [header]
    for group in groups:
        cells = group.summaries
        lines.append([group.label] + [""] * (len(header) - 1))
        status = [
            report_rows.MISSING if s is None else ("ok" if s.succeeded else "FAILED") for s in cells
        ]
        for fig in _figures(rate):
            values = [None if s is None else fig.value(s) for s in cells]
            shown = [report_rows.MISSING if v is None else fig.fmt(v) for v in values]
            ratios = [_ratio(fig, cells[0], s) for s in cells[1:]]
            lines.append([f"  {fig.label}", *shown, *ratios])
        lines.append(["  status", *status] + [""] * (len(docs) - 1))
    legend = [f"{letter} = {d.path}" for letter, d in zip(letters, docs, strict=True)]
    notes = [n for group in groups for n in _differences(group, letters)]
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
    shared = [g for g in match_cells(docs) if all(c is not None for c in g.cells)]
    print(format_comparison(docs))
    if not shared:
        print(
            "ckptbench compare: no cell appears in every file; nothing to compare", file=sys.stderr
        )
        return EXIT_FAILED
    return EXIT_OK
