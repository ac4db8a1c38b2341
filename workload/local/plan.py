"""What ``ckptbench run`` will do, derived from its options before anything starts.

The cells are the cross product of every option given a comma list; each cell is one validated
:class:`WorkloadConfig` with its own run folder. Every problem is found here, naming the option.
"""

from __future__ import annotations

import argparse
import datetime as dt
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ckptbench.workload.contract import cells
from ckptbench.workload.contract.checkpoint import memory_plan, sizes
from ckptbench.workload.contract.choices import Backend, UploadScheme
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.data.choices import Reader
from ckptbench.workload.contract.data.presets import laptop_shape
from ckptbench.workload.contract.data.settings import LoaderSettings
from ckptbench.workload.contract.declaration import Declared
from ckptbench.workload.contract.settings import declared
from ckptbench.workload.contract.storage_settings import bucket_problem
from ckptbench.workload.local.emulator import missing_extra
from ckptbench.workload.local.options import OPTIONS, Option, UsageError, explain, option, values_of
from ckptbench.workload.local.outputs import target
from ckptbench.workload.rank.process import memory
from ckptbench.workload.storage import clean
from ckptbench.workload.storage.file.paths import local_path, why_no_folder

EMULATOR_BUCKET = "ckptbench"
EMULATOR_PREFIX = "ckptbench"
# A collective outlasting the whole run's timeout is a hang, not a slow sample.
MAX_COLLECTIVE_SECONDS = 1800.0


@dataclass(frozen=True)
class Cell:
    """One combination of settings: its label, its config, and its value of each varied option."""

    label: str
    config: WorkloadConfig
    axes: dict[str, str]  # option name (no dashes) -> value as typed, for options with a list


@dataclass(frozen=True)
class Plan:
    """What to run, derived from the options: one config per cell, and where."""

    cells: list[Cell]
    emulator_bucket: str | None  # start an embedded emulator and create this bucket
    storage: str
    timeout: float
    json: target.Target | None = None  # --json: where the summaries go, checked before the run
    csv: target.Target | None = None
    verbose: bool = False  # --verbose: the ranks show the storage libraries' known noise
    quiet: bool = False  # --quiet: no progress, no rank lines; the table and errors only

    @property
    def configs(self) -> list[WorkloadConfig]:
        return [c.config for c in self.cells]


_KINDS = {"gs://": "gs", "s3://": "s3"}


def _storage_kind(storage: str | None, backends: list[tuple[str, Any]]) -> str:
    """``gs``, ``s3`` or ``file``: from --storage, else from the backends asked for."""
    if storage is None:
        schemes = {b.scheme for _, b in backends} - {""}
        if len(schemes) > 1:
            raise UsageError(
                "--backend: gs and s3 backends need a --storage each; run them separately"
            )
        return _KINDS.get(schemes.pop(), "gs") if schemes else "gs"
    for scheme, kind in _KINDS.items():
        if storage.startswith(scheme):
            return kind
    if "://" in storage and not storage.startswith("file://"):
        raise UsageError(
            f"--storage: unsupported scheme in {storage!r} (use file://, gs://, s3://)"
        )
    return "file"


def _local_path(storage: str) -> str:
    try:
        path = local_path(storage).absolute()
    except ValueError as exc:
        raise UsageError(f"--storage: {exc}") from None
    # Refused before any rank starts, not by every rank after it.
    problem = clean.why_system_folder(path.resolve())
    if problem is not None:
        raise UsageError(
            f"--storage: {problem}; ckptbench clean refuses it too, so use a folder of its own"
        )
    problem = why_no_folder(path)
    if problem is not None:
        raise UsageError(f"--storage: {problem}")
    return str(path)


def _backends(raw: str | None, kind: str) -> list[tuple[str, Any]]:
    if raw is None:
        default = {"gs": Backend.GCS, "s3": Backend.S3}.get(kind, Backend.FILE)
        return [(default.value, default)]
    out = values_of(option("--backend"), raw)
    for _, backend in out:
        if backend is Backend.FILE and kind != "file":
            raise UsageError(
                "--backend file needs a local --storage (file:///path or a path); "
                f"--storage is a {kind}:// URL{'' if kind != 'gs' else ' or the embedded emulator'}"
            )
        if backend is not Backend.FILE and backend.scheme != f"{kind}://":
            where = "a local path" if kind == "file" else f"a {kind}:// URL"
            raise UsageError(
                f"--backend {backend.value} needs a {backend.scheme} --storage (or none, for the "
                f"embedded emulator); --storage is {where}"
            )
    return out


def run_id(backend: Backend, now: dt.datetime | None = None, cell: int | None = None) -> str:
    """A fresh folder per run: GCS rate-limits rewrites of one object name."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%d-%H%M%S")
    index = "" if cell is None else f"-c{cell}"
    return f"run-{stamp}-{secrets.token_hex(2)}{index}-{backend.value}"


def _one(args: argparse.Namespace, flag: str) -> Any:
    """A single-valued option's parsed value, or its default."""
    o = option(flag)
    found = values_of(o, getattr(args, o.dest))
    return found[0][1] if found else None


@dataclass(frozen=True)
class Where:
    """Where a local run's data goes: ``gs``, ``s3`` or ``file``, its URL or folder, and the bucket
    an embedded emulator is to create (None: a real store, or a folder)."""

    kind: str
    storage: str
    emulator_bucket: str | None


def where_it_runs(raw_storage: str | None, asked: list[tuple[str, Any]], emulator: bool) -> Where:
    """``--storage`` (None: an embedded emulator) for the backends ``asked``, each problem named;
    ``ckptbench run`` and ``ckptbench data`` alike."""
    kind = _storage_kind(raw_storage, asked)
    emulator_bucket: str | None = None
    if raw_storage is None:
        storage = f"{kind}://{EMULATOR_BUCKET}/{EMULATOR_PREFIX}"
        emulator_bucket = EMULATOR_BUCKET
    elif kind in ("gs", "s3"):
        storage = raw_storage.rstrip("/")
        bucket = raw_storage.removeprefix(f"{kind}://").split("/", 1)[0]
        if not bucket:
            raise UsageError(f"--storage: no bucket in {raw_storage!r}")
        problem = bucket_problem(raw_storage)
        if problem is not None:
            raise UsageError(f"--storage: {problem}")
        if emulator:
            emulator_bucket = bucket
    else:
        if emulator:
            raise UsageError("--emulator: needs a gs:// or s3:// --storage")
        storage = _local_path(raw_storage)
    if emulator_bucket is not None and (problem := missing_extra(kind)) is not None:
        raise UsageError(problem)
    return Where(kind, storage, emulator_bucket)


def plan(args: argparse.Namespace) -> Plan:
    asked = values_of(option("--backend"), args.backend) if args.backend is not None else []
    where = where_it_runs(args.storage, asked, bool(args.emulator))
    kind, storage, emulator_bucket = where.kind, where.storage, where.emulator_bucket
    if emulator_bucket is not None and kind == "s3" and getattr(args, "s3_endpoint", None):
        raise UsageError(
            "--s3-endpoint: give --storage s3://bucket/prefix on that endpoint (with no --storage, "
            "or with --emulator, the run uses the embedded S3 server)"
        )
    outputs = outputs_of(args)
    timeout: float = _one(args, "--timeout")
    if not timeout > 0:
        raise UsageError(f"--timeout: must be positive, got {timeout}")
    fixed: dict[str, Any] = {
        "checkpoint_path": storage,
        "collective_timeout_seconds": min(timeout, MAX_COLLECTIVE_SECONDS),
    }
    given, axes = take_options(args, OPTIONS, fixed, lambda raw: _backends(raw, kind))
    check_acts(given, next(v for o, v in axes if o.flag == "--backend"))
    several = any(len(v) > 1 for _, v in axes)
    planned = _cells(fixed, [(o, v) for o, v in axes if v], several=several, given=given)
    for cell in planned:
        if emulator_bucket is not None:
            check_emulator_can(cell)
        check_memory(cell, memory.available_bytes())
    verbose, quiet = bool(args.verbose), bool(args.quiet)
    if verbose and quiet:
        raise UsageError("--quiet: contradicts --verbose (which shows rank lines --quiet hides)")
    return Plan(planned, emulator_bucket, storage, timeout, **outputs, verbose=verbose, quiet=quiet)


def take_options(
    args: argparse.Namespace,
    options: Sequence[Option],
    fixed: dict[str, Any],
    backends: Callable[[str | None], list[tuple[str, Any]]],
) -> tuple[set[str], list[tuple[Option, list[tuple[str, Any]]]]]:
    """Each option of a settings field, as given: a switch or a single value into ``fixed``, a
    comma list (``--backend`` through ``backends``) as an axis. Returns the fields given and the
    axes, in the options' order (``ckptbench run`` and ``ckptbench data`` alike)."""
    given = {o.field for o in options if o.field and getattr(args, o.dest) not in (None, False)}
    axes: list[tuple[Option, list[tuple[str, Any]]]] = []
    for o in options:
        if o.field is None:
            continue
        raw = getattr(args, o.dest)
        if o.is_switch:
            if raw:
                fixed[o.field] = o.const
        elif o.flag == "--backend":
            axes.append((o, backends(raw)))
        elif o.is_axis:
            axes.append((o, values_of(o, raw)))
        else:
            found = values_of(o, raw)
            if found:
                fixed[o.field] = found[0][1]
    return given, axes


def check_acts(
    given: set[str], backends: list[tuple[str, Any]], settings: Iterable[Declared] | None = None
) -> None:
    """Refuse an option that acts in none of the run's backends: it would be ignored, unsaid
    (``--s3-endpoint`` with gcs ran against GCS). ``settings``: ``ckptbench run``'s by default."""
    names = {backend.value for _, backend in backends}
    for d in declared() if settings is None else settings:
        if d.name in given and d.setting.backends and not names & set(d.setting.backends):
            raise UsageError(
                f"{d.flag}: acts only with backend {' or '.join(d.setting.backends)}; this run's "
                f"backend is {' and '.join(sorted(names))}"
            )


def outputs_of(args: argparse.Namespace) -> dict[str, target.Target]:
    """The output files, each checked now, so a bad one costs no run and loses no results."""
    found = {}
    try:
        for name in ("json", "csv"):
            raw = getattr(args, name)
            if raw is not None:
                found[name] = target.check(f"--{name}", raw)
        target.check_all(list(found.values()))
    except target.TargetError as exc:
        raise UsageError(str(exc)) from None
    return found


def check_emulator_can(cell: Cell) -> None:
    """Refuse, before anything starts, what the embedded emulator cannot serve."""
    c = cell.config
    if c.backend is Backend.GCS and c.upload_scheme is UploadScheme.MULTIPART:
        raise UsageError(
            "--upload-scheme multipart: the embedded emulator (fake-gcs-server) has no XML "
            "multipart upload; use compose, or auto (compose against an emulator, multipart on "
            "GCS)"
        )


def check_memory(cell: Cell, available: int | None) -> None:
    """Refuse a cell whose ranks cannot fit in this machine's available memory, naming the way out.

    The ranks share the machine, so each gets ``available / ranks`` (``world_size``, or
    ``load_world_size`` when a restore is onto more ranks). Fewer ranks need less
    in all (one interpreter and one item buffer fewer each), so the message names the largest
    ``--world-size`` that fits, if any does.
    """
    config = cell.config
    if not config.memory_check or available is None:
        return
    n = config.rank_count
    budget = available // n
    est = config.memory_estimate()
    if est.peak_bytes <= budget:
        return
    fits = [
        k
        for k in range(n - 1, 0, -1)
        if _fits(config.model_copy(update={"world_size": k, "rank": 0}), available)
    ]
    if fits:
        way_out = f"--world-size {fits[0]} fits on this machine"
    else:
        way_out = "no --world-size fits on this machine"
    way_out += (
        "; use fewer --layers or a smaller model"
        if config.model
        else ("; use a smaller --layer-size or --padding-size")
    )
    source = f"{sizes.format_bytes(available)} available on this machine / {n} ranks"
    text = memory_plan.refusal(est, budget, source, way_out, "--force")
    where = f" (in cell {cell.label})" if cell.axes else ""
    option = "--world-size" if n == config.world_size else "--load-world-size"
    raise UsageError(f"{option} {n}: {text}{where}")


def _fits(config: WorkloadConfig, available: int) -> bool:
    """Whether each of ``config``'s ranks fits in its share of ``available``."""
    try:
        return config.memory_estimate().peak_bytes <= available // config.rank_count
    except ValueError:
        return False


def _cells(
    fixed: dict[str, Any],
    axes: list[tuple[Option, list[tuple[str, Any]]]],
    several: bool,
    given: set[str],
) -> list[Cell]:
    stamp = dt.datetime.now(dt.UTC)
    listed = [
        cells.Axis(str(o.field), o.flag, tuple(v for _, v in values), tuple(t for t, _ in values))
        for o, values in axes
    ]
    try:
        combos = cells.cross(listed)
    except cells.CellCountError as exc:
        raise UsageError(str(exc)) from None
    out = []
    for index, combo in enumerate(combos):
        raw = {**fixed, **combo}
        varied = {
            o.name: axis.text(axis.values.index(combo[axis.field]))
            for (o, values), axis in zip(axes, listed, strict=True)
            if len(values) > 1
        }
        if raw.get("model") is not None:
            # The reference layout's defaults do not apply to a model; given, they conflict.
            for name in ("layer_size", "padding_size"):
                if name not in given:
                    raw.pop(name, None)
        backend: Backend = raw["backend"]
        _group(raw, backend)
        raw["run_id"] = run_id(backend, stamp, index if several else None)
        where = [f"{k}={v}" for k, v in varied.items()]
        try:
            config = WorkloadConfig.model_validate(raw)
        except ValidationError as exc:
            raise UsageError(explain(exc, where if several else ())) from None
        out.append(Cell(_label(varied, backend), config, varied))
    return out


def _group(raw: dict[str, Any], backend: Backend) -> None:
    """The loader's options (``data_loading.<name>``) gathered into its group, set when any of
    them is given, its reader the checkpoint backend's own library unless one is given, and its
    preset's laptop shape where the options leave the dataset's size empty."""
    given = {k.split(".", 1)[1]: raw.pop(k) for k in list(raw) if k.startswith("data_loading.")}
    if not given and raw.get("data_loading") is None:
        return
    group = {**(raw.get("data_loading") or {}), **given}
    group.setdefault("backend", Reader(backend.value))
    group.setdefault("preset", LoaderSettings.model_fields["preset"].default)
    laptop_shape(group)
    raw["data_loading"] = group


def _label(varied: dict[str, str], backend: Backend) -> str:
    """The backend alone when only it varies (the column names people know), else each setting."""
    others = cells.label({k: v for k, v in varied.items() if k != "backend"})
    return " ".join(filter(None, [backend.value, others]))
