"""``ckptbench worker``: one rank of the benchmark, the entry point of a benchmark pod.

Configuration comes only from the environment (see ``--help``). The worker meets the other ranks,
runs the timed loop, and reports: the compact result to the termination log (the operator reads
it from the pod's status), the full result beside the checkpoint, and on rank 0 the run's
summary. Exit codes: 0 success, 1 the benchmark failed, 2 the configuration is wrong.
"""

from __future__ import annotations

import gc
import json
import os
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

import torch.distributed as dist

from ckptbench.workload.contract import config as config_module
from ckptbench.workload.contract import environment as environment_vars
from ckptbench.workload.contract.checkpoint import memory_plan, sizes
from ckptbench.workload.contract.choices import Backend, Procedure
from ckptbench.workload.contract.config import ConfigError, WorkloadConfig
from ckptbench.workload.contract.results import figures
from ckptbench.workload.contract.results.figures import summarize
from ckptbench.workload.contract.results.rank import RankResult
from ckptbench.workload.contract.results.records import record_of
from ckptbench.workload.contract.results.summaries import RunSummary
from ckptbench.workload.rank import loop, model_state, rendezvous
from ckptbench.workload.rank.operations import AfterSave
from ckptbench.workload.rank.process import cpus, environment, heartbeat, memory, termination
from ckptbench.workload.storage import noise
from ckptbench.workload.storage import objects as objectio
from ckptbench.workload.storage import session as backends
from ckptbench.workload.storage.file.paths import local_path, why_no_folder

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args and args[0] in ("-h", "--help", "help"):
        print(help_text())
        return EXIT_OK
    if args:
        print(
            f"ckptbench worker: takes no arguments (got {' '.join(args)}); "
            "it reads its settings from the environment: see 'ckptbench worker --help'",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    try:
        config = WorkloadConfig.from_env()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return EXIT_CONFIG
    unknown = config_module.unknown_variables(os.environ)
    if unknown:
        # Most likely a misspelt setting, silently left at its default otherwise.
        print(
            f"[rank {config.rank}] warning: unknown setting(s) {', '.join(unknown)} ignored; "
            "see 'ckptbench worker --help'",
            file=sys.stderr,
        )
    end_rank(run(config))


def run(config: WorkloadConfig, *, after_save: AfterSave | None = None) -> int:
    """Run one rank to the end and report; ``after_save`` is a fault-injection hook for tests."""
    heartbeat.start(config.heartbeat_file, config.progress_timeout_seconds)
    # Before any storage client logs: the libraries' known noise stays out unless asked for.
    quieter = noise.quiet_unless_verbose(os.environ)
    try:
        return _run(config, after_save)
    finally:
        said = quieter.summary() if quieter is not None else None
        if said is not None:
            _logger(config.rank)(said)
        if quieter is not None:
            quieter.remove()


def _run(config: WorkloadConfig, after_save: AfterSave | None) -> int:
    allocator = memory.configure_allocator(config.procedure)
    # Before the first gs:// URL, on which fsspec imports gcsfs: the flag is read at its import.
    backends.prepare_gcsfs()
    if config.backend.scheme == "s3://":
        # Before the first result is written: results go to the same S3 service as checkpoints.
        backends.prepare_s3(config)
    threads = cpus.limit_torch_threads()
    say = _logger(config.rank)
    refused, kind = model_state.model_refusal(config), "ModelRefused"
    if refused is None:
        refused, kind = _memory_refusal(config), "MemoryRefused"
    if refused is None:
        refused, kind = _storage_refusal(config), "StorageRefused"
    if refused is not None:
        # Before the rendezvous and before any tensor: a run that cannot fit never starts.
        say(f"refused: {refused}")
        error = f"{kind}: {refused}"
        result = RankResult(
            rank=config.rank, host=socket.gethostname(), bytes=config.shard_bytes, error=error
        )
        write_termination_log(config, result, say)
        write_result_file(config, result, say)
        return EXIT_CONFIG
    if config.rank == 0:
        say(
            f"{config.describe_ranks()}, {config.describe_state()}, "
            f"backend {config.backend.value}, "
            f"{sizes.format_bytes(config.total_bytes)} in all, "
            f"{sizes.format_bytes(config.shard_bytes)} on rank 0"
            + ("" if config.even_shards else " (uneven shards)")
            + f", {config.samples} sample(s) after {config.warmups} warm-up(s)"
        )
    grouped = False
    stored: dict[str, int] = {}  # the first timed checkpoint's objects and bytes, on rank 0
    try:
        rendezvous.init_process_group(config, log=say)
        grouped = True
        result = loop.run(config, after_save=_measure_stored(config, stored, after_save), log=say)
        if config.rank == 0:  # the local runner and the operator read them from the result
            result = result.model_copy(update={"checkpoint": checkpoint_facts(config, stored)})
    except Exception as exc:
        say(f"error: {RankResult.error_text(exc)}")
        result = RankResult(
            rank=config.rank,
            host=socket.gethostname(),
            bytes=config.shard_bytes,
            error=RankResult.error_text(exc),
        )

    write_termination_log(config, result, say)
    write_result_file(config, result, say)
    env = environment.describe(config, torch_threads=threads, allocator=allocator.record())
    # After a failure the storage is often what failed: the termination log already holds the
    # essentials, so do not keep a failed pod alive for a full retry budget per results file.
    attempts = objectio.ATTEMPTS if result.error is None else 2
    _write_rank_result(config, result, env, say, attempts)
    results = _gather(result, config, say) if grouped else [result]
    if config.rank == 0 and result.error is None:
        # The run's per-sample vectors, from every rank's full lists, in rank 0's own message:
        # the operator's status reads them where the ranks' messages dropped their lists.
        result = result.model_copy(
            update={
                "run": figures.run_samples_of([record_of(r) for r in results], config.total_bytes)
            }
        )
        results = [result if r.rank == 0 else r for r in results]
        write_termination_log(config, result, say)
        write_result_file(config, result, say)
    if config.rank == 0:
        _write_summary(config, results, {**env, "checkpoint": checkpoint_facts(config, stored)},
                       say, attempts)  # fmt: skip
    # Manual collection leaves the last operation's reference cycles (DTensors and their device
    # meshes among them) uncollected: free them while the process group they use still exists,
    # not during interpreter shutdown after it is gone.
    gc.collect()
    rendezvous.destroy()

    return EXIT_OK if result.error is None and result.verified is not False else EXIT_FAILED


def _memory_refusal(config: WorkloadConfig) -> str | None:
    """Why this rank cannot fit in the memory it has, or None (also when unknown or forced)."""
    if not config.memory_check:
        return None
    if config.memory_limit_bytes is not None:
        budget, source = config.memory_limit_bytes, "CKPTBENCH_MEMORY_LIMIT_BYTES"
    else:
        limit = memory.cgroup_limit_bytes()
        if limit is not None:
            budget, source = limit, "the container's memory limit"
        else:
            # No limit: what the node can still give. The estimate counts the interpreter and
            # torch this rank already holds, so they are added back to what is available.
            available = memory.available_bytes()
            if available is None:
                return None
            held = memory.resident_bytes()
            budget = available + held
            source = (
                f"no memory limit: {sizes.format_bytes(available)} available on this node "
                f"(MemAvailable) + {sizes.format_bytes(held)} this rank already holds"
            )
    if config.model is not None:
        way_out = "use fewer layers (CKPTBENCH_LAYERS), more ranks, or a bigger memory limit"
    else:
        way_out = "use a smaller layer_size or padding_size, more ranks, or a bigger memory limit"
    force = "CKPTBENCH_MEMORY_CHECK=false"
    return memory_plan.refusal(config.memory_estimate(), budget, source, way_out, force)


def _storage_refusal(config: WorkloadConfig) -> str | None:
    """Why the file backend's folder cannot take this rank's files, or None (other backends are
    checked by their first request, before any timing)."""
    if config.backend is not Backend.FILE:
        return None
    problem = why_no_folder(local_path(config.checkpoint_path))
    if problem is None:
        return None
    return f"CKPTBENCH_CHECKPOINT_PATH (checkpointPath): {problem}"


def _measure_stored(
    config: WorkloadConfig, out: dict[str, int], inner: AfterSave | None
) -> AfterSave:
    """An after-save hook that lists the first timed checkpoint's objects on rank 0 (untimed)."""
    first = config.warmups if config.procedure is Procedure.CKPTBENCH else 0

    def hook(index: int, checkpoint_id: str) -> None:
        if config.rank == 0 and index == first and not out:
            out.update(objectio.list_sizes(checkpoint_id, project=config.project))
        if inner is not None:
            inner(index, checkpoint_id)

    return hook


def checkpoint_facts(config: WorkloadConfig, stored: dict[str, int]) -> dict[str, int]:
    """Payload beside what storage holds: .metadata and per-item overhead (torch.save blobs)."""
    facts = {"payload_bytes": config.total_bytes}
    if stored:
        facts["stored_bytes"] = sum(stored.values())
        facts["objects"] = len(stored)
        facts["metadata_bytes"] = stored.get(".metadata", 0)
    sized = config.model_sizes()
    if sized is not None:
        facts["stored_items"] = sized.stored_items
        facts["metadata_bytes_estimate"] = sized.metadata_bytes
    return facts


def _logger(rank: int) -> Callable[[str], None]:
    def say(message: str) -> None:
        if not message.startswith("["):
            message = f"[rank {rank}] {message}"
        print(message, file=sys.stderr, flush=True)

    return say


def write_result_file(
    config: WorkloadConfig, result: RankResult, say: Callable[[str], None]
) -> bool:
    """Write the full result, samples and all, where the local runner reads it: the figures
    over ranks need every rank's samples, which a long run's termination message drops."""
    if not config.result_file:
        return False
    path = Path(config.result_file)
    try:
        path.write_text(result.model_dump_json(exclude_none=True))
    except OSError as exc:
        say(f"warning: cannot write the result file {path}: {exc}")
        return False
    return True


def write_termination_log(
    config: WorkloadConfig, result: RankResult, say: Callable[[str], None]
) -> bool:
    """Write the compact result where Kubernetes looks for it; say why when we cannot."""
    return termination.write_termination_log(
        config.termination_log, result.to_termination_message(), say
    )


def _write_rank_result(
    config: WorkloadConfig,
    result: RankResult,
    env: dict[str, object],
    say: Callable[[str], None],
    attempts: int,
) -> None:
    url = f"{config.results_path}/rank-{config.rank:05d}.json"
    document = result.model_dump(mode="json", exclude_none=True)
    document["environment"] = env
    try:
        objectio.write_text(
            url, json.dumps(document, indent=1), project=config.project, attempts=attempts
        )
    except Exception as exc:
        say(f"warning: cannot write the full result to {url}: {RankResult.error_text(exc)}")


def _gather(
    result: RankResult, config: WorkloadConfig, say: Callable[[str], None]
) -> list[RankResult]:
    mine = result.model_dump_json()
    gathered: list[object] | None = [None] * config.rank_count if config.rank == 0 else None
    try:
        dist.gather_object(mine, gathered, dst=0)
    except Exception as exc:
        # A rank that died cannot report; rank 0 still summarises what it has.
        say(f"warning: gathering results failed: {RankResult.error_text(exc)}")
        return [result]
    if gathered is None:
        return [result]
    return [RankResult.model_validate_json(str(text)) for text in gathered if text is not None]


def _write_summary(
    config: WorkloadConfig,
    results: list[RankResult],
    env: dict[str, object],
    say: Callable[[str], None],
    attempts: int,
) -> RunSummary:
    summary = summarize(results, config.world_size, config.total_bytes, config.load_world_size)
    summary = summary.model_copy(update={"extra": env})
    url = f"{config.results_path}/summary.json"
    try:
        objectio.write_text(
            url, summary.model_dump_json(indent=1), project=config.project, attempts=attempts
        )
    except Exception as exc:
        say(f"warning: cannot write the summary to {url}: {RankResult.error_text(exc)}")
    say(_summary_line(summary) + f"; summary in {url}")
    return summary


def _summary_line(summary: RunSummary) -> str:
    parts = []
    for name, op in (("save", summary.save), ("load", summary.load)):
        if op is not None:
            rate = sizes.format_bytes(op.throughput_bytes_per_second)
            parts.append(f"{name} mean {op.mean_seconds:.3f} s ({rate}/s)")
    parts.append(f"verified: {summary.verified}")
    if summary.error_count:
        parts.append(f"{summary.error_count} rank(s) failed")
    if summary.left is not None:
        parts.append(summary.left.notice())
    return ", ".join(parts)


def end_rank(code: int) -> NoReturn:
    """End a rank's process once it has reported, without the interpreter's shutdown.

    Everything is written and the process group is gone. The shutdown would wait for any
    transfer thread still blocked after a failure, and it runs torch's and gloo's C++ static
    destructors, which now and then find a thread still joinable and abort ("terminate called
    without an active exception", SIGABRT), turning a rank that succeeded into a failed pod.
    Every process that runs a rank ends here.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def help_text() -> str:
    lines = [
        "usage: ckptbench worker",
        "",
        "Runs one rank of a checkpoint benchmark. Settings come from the environment:",
        "",
    ]
    lines += environment_vars.describe_variables(WorkloadConfig, config_module.ALIASES)
    lines += [
        "",
        "Exit status: 0 success, 1 the benchmark failed, 2 a configuration value is wrong.",
    ]
    return "\n".join(lines)
