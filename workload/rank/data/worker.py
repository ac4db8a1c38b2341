"""``ckptbench data-worker``: one rank of a data-loading benchmark, the entry point of its pod.

Configuration comes only from the environment (see ``--help``). The rank meets the others, makes
or finds the dataset, reads it through its emulated accelerators, and reports: the compact result
to the termination log (the operator reads it from the pod's status), the same beside the dataset
(``<dataPath>/<run>/results/rank-XXXXX.json``), and on rank 0 the run's summary. Exit codes: 0
success, 1 the benchmark failed, 2 the configuration is wrong or the run cannot fit.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

from ckptbench.workload.contract import environment as environment_vars
from ckptbench.workload.contract.data import figures, memory
from ckptbench.workload.contract.data.config import ALIASES, DataConfig
from ckptbench.workload.contract.data.results import DataRankResult
from ckptbench.workload.contract.environment import ConfigError
from ckptbench.workload.rank.data import procedure
from ckptbench.workload.rank.data.store import Store
from ckptbench.workload.rank.process import heartbeat
from ckptbench.workload.rank.process import memory as process_memory
from ckptbench.workload.rank.process.termination import write_termination_log
from ckptbench.workload.rank.worker import end_rank
from ckptbench.workload.storage import noise, session

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args and args[0] in ("-h", "--help", "help"):
        print(help_text())
        return EXIT_OK
    if args:
        print(
            f"ckptbench data-worker: takes no arguments (got {' '.join(args)}); it reads its "
            "settings from the environment: see 'ckptbench data-worker --help'",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    try:
        config = DataConfig.from_env()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return EXIT_CONFIG
    end_rank(run(config))


def _logger(rank: int) -> Callable[[str], None]:
    def say(message: str) -> None:
        print(f"[rank {rank}] {message}", file=sys.stderr, flush=True)

    return say


def run(config: DataConfig) -> int:
    say = _logger(config.rank)
    heartbeat.start(config.heartbeat_file, config.progress_timeout_seconds)
    quieter = noise.quiet_unless_verbose(os.environ)
    session.prepare_gcsfs()
    if config.backend.scheme == "s3://":
        session.prepare_s3(config)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: _stop(stop, frame))
    limit = config.memory_limit_bytes or process_memory.cgroup_limit_bytes()
    refused = memory.refusal(config, limit, process_memory.available_bytes())
    if refused is not None:
        say(f"refused: {refused}")
        _report(
            config,
            DataRankResult(
                rank=config.rank, host=socket.gethostname(), error=f"MemoryRefused: {refused}"
            ),
            say,
        )
        return EXIT_CONFIG
    if config.rank == 0:
        say(
            f"{config.world_size} rank(s) x {config.accelerators_per_rank} accelerator(s), "
            f"reader {config.backend.value}, {config.preset.value}: "
            f"{config.resolved_files} {config.resolved_format.value} file(s) of "
            f"{config.resolved_samples_per_file} x {config.resolved_sample_bytes} B, "
            f"batch {config.resolved_batch_size}, {config.resolved_workers} worker(s), "
            f"{config.resolved_epochs} epoch(s), compute {config.resolved_compute_seconds:g} s "
            "a batch"
        )
    everyone: list[DataRankResult] = []
    try:
        result, everyone = procedure.run(config, say, stop)
    except Exception as exc:
        say(f"failed: {type(exc).__name__}: {exc}")
        result = DataRankResult(
            rank=config.rank,
            host=socket.gethostname(),
            error=f"{type(exc).__name__}: {exc}"[:1000],
        )
    finally:
        if quieter is not None:
            said = quieter.summary()
            if said:
                say(said)
            quieter.remove()
    _report(config, result, say)
    if config.rank == 0 and everyone:
        _summary(config, everyone, say)
    return EXIT_OK if result.succeeded and not stop.is_set() else EXIT_FAILED


def _stop(stop: threading.Event, frame: FrameType | None) -> None:
    stop.set()


def _report(config: DataConfig, result: DataRankResult, say: Callable[[str], None]) -> None:
    write_termination_log(config.termination_log, result.to_message(), say)
    if result.error is not None:
        return
    store = Store(config)
    try:
        store.write(
            f"{config.results_path}/rank-{config.rank:05d}.json", result.to_message().encode()
        )
    except Exception as exc:
        say(f"warning: cannot write the result beside the dataset: {exc}")


def _summary(config: DataConfig, results: list[DataRankResult], say: Callable[[str], None]) -> None:
    store = Store(config)
    summary = figures.summarize(results, config.world_size, config.resolved_au_floor)
    document = {"summary": summary.model_dump(mode="json"), "settings": config.record()}
    try:
        store.write(f"{config.results_path}/summary.json", json.dumps(document, indent=1).encode())
    except Exception as exc:
        say(f"warning: cannot write the summary beside the dataset: {exc}")
    say(
        f"{summary.samples_per_second} samples/s, AU {summary.accelerator_utilization}, "
        f"verified: {summary.verified}; summary in {config.results_path}/summary.json"
    )


def help_text() -> str:
    lines = [
        "usage: ckptbench data-worker",
        "",
        "Runs one rank of a data-loading benchmark. Settings come from the environment:",
        "",
        *environment_vars.describe_variables(DataConfig, ALIASES),
        "",
        "Exit status: 0 success, 1 the benchmark failed, 2 a configuration value is wrong.",
    ]
    return "\n".join(lines)
