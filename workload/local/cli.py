"""``ckptbench run``: the benchmark on this machine, N local ranks, one cell after another.

With no ``--storage`` it starts an embedded emulator (fake-gcs-server, or moto's S3 server for
backends s3 and s3fs), runs against a bucket on it, and stops it. With a ``gs://`` URL it talks to
real GCS with Application Default Credentials (or to the emulator named by
``STORAGE_EMULATOR_HOST``, if the caller set one); with an ``s3://`` URL, to the S3 service the
settings or the AWS variables name, with the AWS standard credential chain.
Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.choices import Backend
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.names import EMULATOR_ENV, GCSFS_HNS_FLAG, VERBOSE_LOGS_ENV
from ckptbench.workload.contract.results import figures
from ckptbench.workload.contract.results.rank import RankResult
from ckptbench.workload.contract.results.summaries import RunSummary
from ckptbench.workload.local import preflight, report
from ckptbench.workload.local.emulator import EmulatorError, GcsEmulator
from ckptbench.workload.local.loopback.xml_multipart import XmlMultipartShim
from ckptbench.workload.local.options import UsageError, build_parser, parse_size
from ckptbench.workload.local.outcome import RanksOutcome
from ckptbench.workload.local.outputs import csvfile, document, target
from ckptbench.workload.local.outputs.progress import Progress
from ckptbench.workload.local.plan import EMULATOR_BUCKET, Plan, plan
from ckptbench.workload.local.runner import run_ranks
from ckptbench.workload.local.s3_server import S3Server
from ckptbench.workload.rank.process import environment
from ckptbench.workload.storage.s3 import where as s3_where

# Where things moved when the options got their own modules; callers and tests import them here.
__all__ = ["EMULATOR_BUCKET", "Plan", "UsageError", "build_parser", "main", "parse_size", "plan"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def settings(config: WorkloadConfig, emulator: str | None) -> dict[str, Any]:
    """Every declared setting that acted in this run (``BenchmarkSettings.record``), and where
    it ran: enough to run it again."""
    s: dict[str, Any] = {**config.record(), "run_id": config.run_id}
    s["even_shards"] = config.even_shards
    if config.cache_mode is not None:
        s["cache"] = config.cache_mode.value
    if emulator:
        s["emulator"] = emulator
    if "s3_endpoint" in s:
        # Where the ranks' clients went: AWS_ENDPOINT_URL(_S3) and AWS_REGION when the options
        # left them unset (the rank resolves them the same way), so no run hides its store.
        where = s3_where.resolve(config.s3_endpoint, config.s3_region, config.s3_path_style)
        s.update(s3_endpoint=where.endpoint, s3_region=where.region)
    return s


def summary_of(
    config: WorkloadConfig,
    outcome: RanksOutcome[RankResult],
    emulator: str | None,
    axes: dict[str, str] | None = None,
) -> RunSummary:
    s = figures.summarize(
        outcome.results, config.world_size, config.total_bytes, config.load_world_size
    )
    extra: dict[str, Any] = {
        **environment.machine(),
        "settings": settings(config, emulator),
        "axes": axes or {},
        "seconds": round(outcome.seconds, 3),
        "exit_codes": [e.returncode for e in sorted(outcome.exits, key=lambda e: e.rank)],
        "peak_rss_bytes": outcome.peak_rss_bytes(),
    }
    facts = figures.checkpoint_facts(outcome.results)
    if facts is not None:
        # Rank 0 lists the stored checkpoint; its summary.json may be gone with the emulator.
        extra["checkpoint"] = facts
    why = outcome.missing_why()
    if why:
        extra["missing_why"] = why
    category = figures.category_figures(extra["settings"])
    return s.model_copy(update={"extra": extra, **category})


def _exit_lines(label: str, outcome: RanksOutcome[RankResult], summary: RunSummary) -> list[str]:
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
def _maybe_emulator(
    bucket: str | None, storage: str, xml_multipart: bool = False
) -> Iterator[GcsEmulator | S3Server | XmlMultipartShim | None]:
    """The embedded emulator of a run with no store of its own. With ``xml_multipart`` (a cell
    runs Google's connector, whose writer uploads only through GCS's XML multipart upload) a GCS
    emulator is served through the shim that adds that upload; every cell of the run then goes
    through it, so the cells compared share one path to the emulator."""
    if bucket is None:
        yield None
        return
    emu = S3Server() if storage.startswith("s3://") else GcsEmulator()
    with emu:
        emu.create_bucket(bucket)
        if not xml_multipart or isinstance(emu, S3Server):
            yield emu
            return
        with XmlMultipartShim(emu.url).running() as shim:
            yield shim


def execute(p: Plan, stop: threading.Event, err: Any) -> tuple[list[tuple[str, RunSummary]], bool]:
    """Run each cell in turn; returns the summaries and whether every run succeeded."""
    with contextlib.ExitStack() as stack:
        # --quiet: the cells' headers, progress and rank lines go nowhere; what went wrong is
        # still said, by the failure lines under the table and the exit lines below.
        shown = stack.enter_context(open(os.devnull, "w")) if p.quiet else err
        return _execute(p, stop, shown, err)


def _execute(
    p: Plan, stop: threading.Event, shown: Any, err: Any
) -> tuple[list[tuple[str, RunSummary]], bool]:
    runs: list[tuple[str, RunSummary]] = []
    ok = True
    multipart = any(cell.config.backend is Backend.DATAFLUX for cell in p.cells)
    with _maybe_emulator(p.emulator_bucket, p.storage, multipart) as emu:
        extra_env: dict[str, str] = {}
        emulator_url: str | None = os.environ.get(EMULATOR_ENV) or None
        if isinstance(emu, S3Server):
            emulator_url = emu.url
            extra_env.update(emu.env())
        elif emu is not None:
            emulator_url = emu.url
            extra_env[EMULATOR_ENV] = emu.url
        if p.verbose:
            extra_env[VERBOSE_LOGS_ENV] = "1"
        if emulator_url:
            # gcsfs stalls ~60 s per bucket call on an emulator unless this is off at import.
            extra_env[GCSFS_HNS_FLAG] = "false"
        progress = Progress(len(p.cells), shown)
        for index, cell in enumerate(p.cells):
            if stop.is_set():
                break
            config, label = cell.config, cell.label
            prefix = progress.start_cell(index, label, config)
            where = f"emulator {emulator_url}" if emulator_url else config.checkpoint_path
            largest = config.model_copy(update={"rank": 0}).shard_bytes
            print(
                f"{prefix}{label}: {config.describe_ranks('ranks')}, {config.describe_state()}, "
                f"{sizes.format_bytes(config.total_bytes)} in all, "
                f"{sizes.format_bytes(largest)} a shard"
                f"{'' if config.even_shards else ' (uneven shards)'}, "
                f"{config.samples} samples + {config.warmups} warm-up, on {where}, "
                f"run {config.run_id}",
                file=shown,
                flush=True,
            )
            outcome = run_ranks(
                config,
                stop=stop,
                out=shown,
                label=label,
                timeout=p.timeout,
                extra_env=extra_env,
                watch=progress.line,
            )
            progress.end_cell()
            summary = summary_of(config, outcome, emulator_url, cell.axes)
            runs.append((label, summary))
            for line in _exit_lines(label, outcome, summary):
                print(line, file=err)
            if not (summary.succeeded and outcome.all_exited_zero):
                ok = False
            if outcome.interrupted:
                break
    return runs, ok


def _s3_service(config: WorkloadConfig) -> tuple[str | None, str | None, bool]:
    return (config.s3_endpoint, config.s3_region, config.s3_path_style)


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
    if p.emulator_bucket is None and p.storage.startswith("gs://"):
        try:
            preflight.check_gcs(p.storage, p.cells[0].config.project)
        except preflight.PreflightError as exc:
            print(f"ckptbench run: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if p.emulator_bucket is None and p.storage.startswith("s3://"):
        try:
            for config in {_s3_service(c.config): c.config for c in p.cells}.values():
                preflight.check_s3(p.storage, config)
        except preflight.PreflightError as exc:
            print(f"ckptbench run: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    stop = threading.Event()
    with stop_on_signals(stop):
        try:
            runs, ok = execute(p, stop, sys.stderr)
        except EmulatorError as exc:
            print(f"ckptbench run: the embedded emulator failed: {exc}", file=sys.stderr)
            return EXIT_FAILED
    if runs:
        # Standard output carries the JSON or the CSV when asked to; the table then goes aside.
        print(report.format_report(runs), file=target.table_stream([p.json, p.csv]))
        written = target.write_each(
            [
                (p.json, document.to_text(runs, ok and not stop.is_set())),
                (p.csv, csvfile.to_csv(runs)),
            ],
            "ckptbench run",
        )
        ok = ok and written
    if runs and p.emulator_bucket is not None and p.json is None:
        # The ranks' logs name results/summary.json in the bucket; that bucket went with the
        # embedded emulator.
        print(
            "ckptbench run: the embedded emulator's bucket, results/ included, is gone with it; "
            "--json FILE keeps every figure and setting of the run",
            file=sys.stderr,
        )
    if stop.is_set():
        print("ckptbench run: interrupted; every rank was stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK if ok else EXIT_FAILED
