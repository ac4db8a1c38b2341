"""What ``ckptbench data`` will do, derived from its options before anything starts: one validated
:class:`DataConfig` per cell (the cross product of the comma lists), where the data goes, and the
outputs, every problem named by its option."""

from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ckptbench.workload.contract import cells
from ckptbench.workload.contract.data import memory
from ckptbench.workload.contract.data.choices import Reader
from ckptbench.workload.contract.data.config import DataConfig
from ckptbench.workload.contract.data.presets import laptop_shape
from ckptbench.workload.contract.data.settings import declared as data_declared
from ckptbench.workload.local import plan as run_plan
from ckptbench.workload.local.data.options import OPTION_OF, OPTIONS, option
from ckptbench.workload.local.options import Option, UsageError, explain, values_of
from ckptbench.workload.local.outputs import target
from ckptbench.workload.rank.process import memory as process_memory

EMULATOR_BUCKET = run_plan.EMULATOR_BUCKET


@dataclass(frozen=True)
class Cell:
    label: str
    config: DataConfig
    axes: dict[str, str]


@dataclass(frozen=True)
class Plan:
    cells: list[Cell]
    emulator_bucket: str | None
    storage: str
    timeout: float
    json: target.Target | None = None
    csv: target.Target | None = None
    verbose: bool = False


def _backends(raw: str | None, kind: str) -> list[tuple[str, Any]]:
    if raw is None:
        default = {"gs": Reader.GCS, "s3": Reader.S3}.get(kind, Reader.FILE)
        return [(default.value, default)]
    out = values_of(option("--backend"), raw)
    for _, reader in out:
        wanted = "file" if reader is Reader.FILE else reader.scheme.removesuffix("://")
        if wanted != kind:
            where = "a local path" if kind == "file" else f"a {kind}:// URL"
            needs = (
                "a local --storage"
                if reader is Reader.FILE
                else (f"a {reader.scheme} --storage (or none, for the embedded emulator)")
            )
            raise UsageError(f"--backend {reader.value} needs {needs}; --storage is {where}")
    return out


def plan(args: argparse.Namespace) -> Plan:
    asked = values_of(option("--backend"), args.backend) if args.backend is not None else []
    where = run_plan.where_it_runs(args.storage, asked, bool(args.emulator))
    kind, storage, emulator_bucket = where.kind, where.storage, where.emulator_bucket
    outputs = run_plan.outputs_of(args)
    timeout: float = values_of(option("--timeout"), args.timeout)[0][1]
    if not timeout > 0:
        raise UsageError(f"--timeout: must be positive, got {timeout}")
    fixed: dict[str, Any] = {"data_path": storage, "collective_timeout_seconds": timeout}
    given, axes = run_plan.take_options(args, OPTIONS, fixed, lambda raw: _backends(raw, kind))
    run_plan.check_acts(given, next(v for o, v in axes if o.flag == "--backend"), data_declared())
    planned = _cells(fixed, [(o, v) for o, v in axes if v])
    available = process_memory.available_bytes()
    for cell in planned:
        _check_memory(cell, available)
    return Plan(planned, emulator_bucket, storage, timeout, **outputs, verbose=bool(args.verbose))


def _cells(fixed: dict[str, Any], axes: list[tuple[Option, list[tuple[str, Any]]]]) -> list[Cell]:
    stamp = dt.datetime.now(dt.UTC)
    listed = [
        cells.Axis(str(o.field), o.flag, tuple(v for _, v in values), tuple(t for t, _ in values))
        for o, values in axes
    ]
    try:
        combos = cells.cross(listed)
    except cells.CellCountError as exc:
        raise UsageError(str(exc)) from None
    several = len(combos) > 1
    out = []
    for index, combo in enumerate(combos):
        raw = {**fixed, **combo}
        laptop_shape(raw)
        varied = {
            o.name: axis.text(axis.values.index(combo[axis.field]))
            for (o, values), axis in zip(axes, listed, strict=True)
            if len(values) > 1
        }
        reader: Reader = raw["backend"]
        raw["run_id"] = run_plan.run_id(reader, stamp, index if several else None)  # type: ignore[arg-type]
        where = [f"{k}={v}" for k, v in varied.items()]
        try:
            config = DataConfig.model_validate(raw)
        except ValidationError as exc:
            raise UsageError(explain(exc, where if several else (), OPTION_OF)) from None
        others = cells.label({k: v for k, v in varied.items() if k != "backend"})
        label = " ".join(filter(None, [reader.value, others]))
        out.append(Cell(label, config, varied))
    return out


def _check_memory(cell: Cell, available: int | None) -> None:
    """The ranks share this machine: each gets its share of the memory available."""
    if available is None:
        return
    ranks = cell.config.world_size
    refused = memory.refusal(cell.config, None, available // ranks)
    if refused is not None:
        where = f" (in cell {cell.label})" if cell.axes else ""
        raise UsageError(f"--world-size {ranks}: {refused}{where}")
