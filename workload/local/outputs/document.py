"""The results file of ``ckptbench run --json``: written here, and read back by ``compare`` and
``report``.

One document holds every cell of a run: ``{"succeeded", "cells": [label...], "runs": [...]}``,
each run a :class:`RunSummary` plus its ``cell`` label and ``backend``. The cell's settings are in
``extra.settings`` and its value of each varied option in ``extra.axes``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ckptbench.workload.contract import inputs
from ckptbench.workload.contract.results.summaries import RunSummary
from ckptbench.workload.local.outputs import target

# A results file holds bounded summaries: a sweep's 64 cells of 1,000 samples each, every sample
# listed twice per operation, take about 8 MB. /dev/zero or a FIFO stops here, not at memory's end.
MAX_BYTES = 64 * 1024**2


class DocumentError(ValueError):
    """A file that is not a results document; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Document:
    path: Path
    succeeded: bool
    runs: list[tuple[str, RunSummary]]  # (cell label, summary), in the order they ran

    @property
    def name(self) -> str:
        return self.path.name


def to_json(runs: Sequence[tuple[str, RunSummary]], ok: bool) -> dict[str, Any]:
    return {
        "succeeded": ok,
        "cells": [label for label, _ in runs],
        "runs": [
            {
                "cell": label,
                "backend": s.extra.get("settings", {}).get("backend"),
                **s.model_dump(mode="json"),
            }
            for label, s in runs
        ],
    }


def to_text(runs: Sequence[tuple[str, RunSummary]], ok: bool) -> str:
    return json.dumps(to_json(runs, ok), indent=2) + "\n"


def write_json(path: Path, runs: Sequence[tuple[str, RunSummary]], ok: bool) -> None:
    target.Target("--json", path).write(to_text(runs, ok))


def read_json(path: Path) -> Document:
    try:
        data = inputs.read_bounded(path, MAX_BYTES, "a results file")
    except OSError as exc:
        raise DocumentError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except inputs.InputTooLarge as exc:
        raise DocumentError(f"{path}: {exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(
            f"{path}: not JSON: byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8"
        ) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(f"{path}: not JSON: {exc}") from None
    except RecursionError:
        raise DocumentError(f"{path}: not a results file: nested too deep to read") from None
    except ValueError as exc:  # an integer past Python's digit limit for str -> int
        raise DocumentError(f"{path}: not a results file: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise DocumentError(f"{path}: not a results file of 'ckptbench run --json' (no 'runs')")
    runs: list[tuple[str, RunSummary]] = []
    for i, raw in enumerate(doc["runs"]):
        if not isinstance(raw, dict):
            raise DocumentError(f"{path}: runs[{i}] is not an object")
        # Files written before sweeps carry only the backend as the cell's name.
        label = raw.get("cell") or raw.get("backend")
        if not isinstance(label, str) or not label:
            raise DocumentError(f"{path}: runs[{i}] has no 'cell' label")
        try:
            summary = RunSummary.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise DocumentError(f"{path}: runs[{i}].{where}: {first['msg']}") from None
        runs.append((label, summary))
    if not runs:
        raise DocumentError(f"{path}: holds no runs")
    labels = [label for label, _ in runs]
    if len(set(labels)) != len(labels):
        raise DocumentError(f"{path}: cell labels repeat: {labels}")
    return Document(path, bool(doc.get("succeeded", False)), runs)
