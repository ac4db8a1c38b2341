"""``ckptbench data``: the data-loading benchmark on this machine, N local ranks, one cell after
another, as ``ckptbench run`` runs checkpoints (the same emulators, runner, outputs and signals).
Progress goes to stderr, the table to stdout."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

from ckptbench.workload.contract.data import figures
from ckptbench.workload.contract.data.results import DataRankResult
from ckptbench.workload.contract.names import EMULATOR_ENV, GCSFS_HNS_FLAG, VERBOSE_LOGS_ENV
from ckptbench.workload.local.cli import _maybe_emulator, stop_on_signals
from ckptbench.workload.local.data import report
from ckptbench.workload.local.data.options import build_parser
from ckptbench.workload.local.data.plan import Plan, plan
from ckptbench.workload.local.emulator import EmulatorError
from ckptbench.workload.local.options import UsageError
from ckptbench.workload.local.outputs import target
from ckptbench.workload.local.outputs.progress import EPOCH_DONE, Progress
from ckptbench.workload.local.runner import run_ranks
from ckptbench.workload.local.s3_server import S3Server
from ckptbench.workload.rank.process import environment

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
SCHEMA = "ckptbench.data.results/v1"
DATA_WORKER: tuple[str, ...] = (sys.executable, "-m", "ckptbench.cli", "data-worker")


def execute(p: Plan, stop: threading.Event, err: Any) -> tuple[list[dict[str, Any]], bool]:
    """Run each cell in turn; each run's record (label, settings, summary) and whether all
    succeeded."""
    records: list[dict[str, Any]] = []
    ok = True
    with _maybe_emulator(p.emulator_bucket, p.storage) as emu:
        extra_env: dict[str, str] = {GCSFS_HNS_FLAG: "false"}
        emulator_url = os.environ.get(EMULATOR_ENV) or None
        if isinstance(emu, S3Server):
            emulator_url = emu.url
            extra_env.update(emu.env())
        elif emu is not None:
            emulator_url = emu.url
            extra_env[EMULATOR_ENV] = emu.url
        if p.verbose:
            extra_env[VERBOSE_LOGS_ENV] = "1"
        progress = Progress(len(p.cells), err, done=EPOCH_DONE, step="epoch")
        for index, cell in enumerate(p.cells):
            if stop.is_set():
                break
            c = cell.config
            prefix = progress.start(index, cell.label, c.resolved_epochs)
            print(
                f"{prefix}{cell.label}: {c.world_size} rank(s) x "
                f"{c.accelerators_per_rank} accelerator(s), {c.dataset.name} on "
                f"{(emulator_url and f'emulator {emulator_url}') or c.data_path}, run {c.run_id}",
                file=err,
                flush=True,
            )
            outcome = run_ranks(
                c, stop=stop, out=err, label=cell.label, timeout=p.timeout,
                extra_env=extra_env, command=DATA_WORKER, parse=DataRankResult.from_message,
                watch=progress.line,
            )  # fmt: skip
            progress.end_cell()
            summary = figures.summarize(outcome.results, c.world_size, c.resolved_au_floor)
            missing = outcome.missing_why()
            if missing:
                errors = {**summary.errors, **missing}
                summary = summary.model_copy(update={"errors": errors})
            ok = ok and summary.succeeded and outcome.all_exited_zero
            records.append(
                {
                    "label": cell.label,
                    "axes": cell.axes,
                    "accelerators": c.accelerators,
                    "settings": {
                        **c.record(),
                        "run_id": c.run_id,
                        "dataset": c.dataset.name,
                        **({"emulator": emulator_url} if emulator_url else {}),
                    },
                    "summary": summary.model_dump(mode="json"),
                    "machine": environment.machine(),
                    "seconds": round(outcome.seconds, 3),
                    "peak_rss_bytes": outcome.peak_rss_bytes(),
                }
            )
            if outcome.interrupted:
                break
    return records, ok


def _runs(records: Sequence[dict[str, Any]]) -> list[report.Run]:
    return [
        report.Run(r["label"], figures.DataSummary.model_validate(r["summary"]), r["accelerators"])
        for r in records
    ]


def to_json(records: Sequence[dict[str, Any]], ok: bool) -> str:
    sustained = report.sustained(_runs(records))
    doc = {"schema": SCHEMA, "ok": ok, "runs": list(records), "sustained_accelerators": sustained}
    return json.dumps(doc, indent=1) + "\n"


CSV_FIGURES = (
    "samples_per_second", "bytes_per_second", "egress_gbps", "accelerator_utilization",
    "accelerator_utilization_min", "au_floor", "au_passed", "first_batch_seconds",
    "batch_wait_p50_seconds", "batch_wait_p90_seconds", "batch_wait_p99_seconds",
    "listing_seconds", "prepare_seconds", "requests", "samples", "bytes", "verified_bytes",
    "verified", "run_seconds",
)  # fmt: skip


def to_csv(records: Sequence[dict[str, Any]]) -> str:
    settings = list(dict.fromkeys(k for r in records for k in r["settings"]))
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["label", *settings, *CSV_FIGURES])
    for r in records:
        writer.writerow(
            [
                r["label"],
                *(r["settings"].get(k, "") for k in settings),
                *(r["summary"].get(k, "") for k in CSV_FIGURES),
            ]
        )
    return out.getvalue()


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        p = plan(args)
    except UsageError as exc:
        print(f"ckptbench data: error: {exc}\n(see: ckptbench data --help)", file=sys.stderr)
        return EXIT_USAGE
    stop = threading.Event()
    with stop_on_signals(stop):
        try:
            records, ok = execute(p, stop, sys.stderr)
        except EmulatorError as exc:
            print(f"ckptbench data: the embedded emulator failed: {exc}", file=sys.stderr)
            return EXIT_FAILED
    if records:
        print(report.format_report(_runs(records)), file=target.table_stream([p.json, p.csv]))
        written = target.write_each(
            [(p.json, to_json(records, ok and not stop.is_set())), (p.csv, to_csv(records))],
            "ckptbench data",
        )
        ok = ok and written
    if stop.is_set():
        print("ckptbench data: interrupted; every rank was stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK if ok else EXIT_FAILED
