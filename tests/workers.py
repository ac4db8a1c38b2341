"""Spawning real worker processes for tests, and a worker entry point with fault injection.

``python -m tests.workers corrupt RANK TENSOR``, ``python -m tests.workers delete RANK`` and
``python -m tests.workers garble-metadata 0`` run an ordinary rank
(:func:`ckptbench.workload.rank.worker.run`) whose after-save hook damages the first timed
sample's checkpoint on disk between its save and its load: the real save, load and verification
code paths then have to notice. ``python -m tests.workers slow-write RANK SECONDS``
delays every ``write_data`` of rank RANK; ``slow-delete RANK SECONDS`` delays its deletes of
its own objects, and ``fail-delete RANK`` makes them raise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptbench.workload.contract.config import ENV_PREFIX, WorkloadConfig
from ckptbench.workload.contract.names import EMULATOR_ENV
from ckptbench.workload.contract.results.rank import RankResult
from ckptbench.workload.local.emulator import free_port

if TYPE_CHECKING:
    from torch.distributed.checkpoint.storage import StorageWriter

    from ckptbench.workload.storage.timing import TimedWriter

ROOT = Path(__file__).resolve().parent.parent
WORKER = [sys.executable, "-m", "ckptbench.cli", "worker"]
# Variables a developer's shell could carry into a child and change what it runs.
_LEAKY = {"WORLD_SIZE", "RANK", "JOB_COMPLETION_INDEX", "LAYER_SIZE", "PADDING_SIZE",
          "SAMPLE_COUNT", "CKPT_DIR_PATH", "PROJECT", "USE_FSSPEC", "MASTER_ADDR", "MASTER_PORT",
          EMULATOR_ENV}  # fmt: skip


def small_config(checkpoint_path: str, **overrides: object) -> WorkloadConfig:
    """A config sized for tests: a few MiB, short timeouts, a free rendezvous port."""
    values: dict[str, object] = {
        "checkpoint_path": checkpoint_path,
        "backend": "gcsfs" if checkpoint_path.startswith("gs://") else "file",
        "world_size": 2,
        "layer_size": 1000,
        "padding_size": 8,
        "sample_count": 2,
        "warmup_samples": 1,
        "master_port": free_port(),
        "rendezvous_timeout_seconds": 30,
        "collective_timeout_seconds": 30,
    }
    values.update(overrides)
    if values.get("model") is not None:  # a model preset excludes the reference layout's sizes
        del values["layer_size"], values["padding_size"]
    return WorkloadConfig.model_validate(values)


def one_rank(tmp_path: Path, **overrides: object) -> WorkloadConfig:
    """One rank run in the test's own process, no process group, DCP on a local folder."""
    values: dict[str, object] = {
        "checkpoint_path": f"file://{tmp_path}/ckpt",
        "backend": "file",
        "world_size": 1,
        "layer_size": 500,
        "padding_size": 3,
        "sample_count": 2,
        "warmup_samples": 0,
    }
    values.update(overrides)
    return WorkloadConfig.model_validate(values)


def children_by_parent() -> dict[int, list[int]]:
    """The live processes' ids by their parent's, read from /proc (one that ends meanwhile is
    passed over)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def ckptbench(*argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """The real command line, ``ckptbench ARGV...``, in a child process; its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def base_env(emulator_url: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX) and k not in _LEAKY}
    # Several ranks share two cores: one compute thread each keeps them from thrashing.
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if emulator_url:
        env[EMULATOR_ENV] = emulator_url
    return env


@dataclass
class Worker:
    rank: int
    proc: subprocess.Popen[bytes]
    stderr_path: Path
    termination_path: Path

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    @property
    def result(self) -> RankResult:
        return RankResult.from_termination_message(self.termination_path.read_text())


def spawn(
    config: WorkloadConfig,
    tmp_path: Path,
    *,
    emulator_url: str | None = None,
    command: list[str] | None = None,
    ranks: list[int] | None = None,
    extra_env: dict[str, str] | None = None,
) -> list[Worker]:
    """Start one process per rank, last rank first, so rank 0 is the one that starts last."""
    workers = []
    for rank in reversed(ranks if ranks is not None else range(config.rank_count)):
        stderr_path = tmp_path / f"rank-{rank}.stderr"
        termination = tmp_path / f"rank-{rank}.termination-log"
        env = base_env(emulator_url)
        env.update(config.to_env())
        env[ENV_PREFIX + "RANK"] = str(rank)
        env[ENV_PREFIX + "TERMINATION_LOG"] = str(termination)
        env.update(extra_env or {})
        with stderr_path.open("wb") as err:
            proc = subprocess.Popen(
                command or WORKER,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        workers.append(Worker(rank, proc, stderr_path, termination))
    return sorted(workers, key=lambda w: w.rank)


def wait(workers: list[Worker], timeout: float) -> list[Worker]:
    """Wait for every worker; kill them all and fail if any outlives ``timeout``."""
    deadline = time.monotonic() + timeout
    try:
        for w in workers:
            w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        stop(workers)
        logs = "\n".join(f"--- rank {w.rank}\n{w.stderr[-3000:]}" for w in workers)
        raise AssertionError(f"workers still running after {timeout:.0f} s\n{logs}") from None
    return workers


def stop(workers: list[Worker]) -> None:
    for w in workers:
        if w.proc.poll() is None:
            w.proc.kill()
    for w in workers:
        w.proc.wait()


# A hang guard, not a speed target: 4 ranks each importing torch on a busy 2-core machine
# have taken over a minute to finish a run that takes 10 s on a quiet one.
HANG_GUARD_SECONDS = 150.0


def run(
    config: WorkloadConfig, tmp_path: Path, *, timeout: float = HANG_GUARD_SECONDS, **kwargs: object
) -> list[Worker]:
    workers = spawn(config, tmp_path, **kwargs)  # type: ignore[arg-type]
    return wait(workers, timeout)


def logs(workers: list[Worker]) -> str:
    return "\n".join(f"--- rank {w.rank} (exit {w.proc.returncode})\n{w.stderr}" for w in workers)


# -- fault injection (runs inside a worker process) ------------------------------------------------


def _corrupt(checkpoint_id: str, tensor: str, rank: int = 0) -> None:
    """Flip one bit in the middle of ``tensor``'s bytes in ``rank``'s file (a DTensor has a
    chunk in every rank's file; a reference tensor lives in its owner's only)."""
    from torch.distributed.checkpoint.filesystem import FileSystemReader

    metadata = FileSystemReader(checkpoint_id).read_metadata()
    entries = sorted(
        metadata.storage_data.items(),
        key=lambda kv: not kv[1].relative_path.startswith(f"__{rank}_"),
    )
    for index, info in entries:
        if index.fqn == tensor:
            path = Path(checkpoint_id) / info.relative_path
            with path.open("r+b") as f:
                f.seek(info.offset + info.length // 2)
                byte = f.read(1)[0]
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([byte ^ 0x01]))
            return
    raise AssertionError(f"{tensor} not in the checkpoint's metadata")


def slow_writes(delay: float) -> Callable[[StorageWriter], TimedWriter]:
    """A stand-in for ``timing.timed_writer`` whose writer's ``write_data`` first sleeps ``delay``.

    The sleep is inside the wrapped writer's ``write_data``: storage I/O that took longer.
    """
    from ckptbench.workload.storage import timing

    real = timing.timed_writer

    class _Slow(timing.TimedWriter):
        def write_data(self, plan: Any, planner: Any) -> Any:
            time.sleep(delay)
            return self.inner.write_data(plan, planner)

    def wrap(inner: StorageWriter) -> TimedWriter:
        return real(_Slow(inner))

    return wrap


def _break_deletes(mode: str, delay: float) -> None:
    """This rank's deletes of its own objects sleep ``delay`` first, or raise."""
    from ckptbench.workload.storage import session

    real = session.StorageSession.delete_prefix

    def delete_prefix(self: Any, url: str, name_prefix: str = "") -> int:
        if name_prefix:
            if mode == "fail-delete":
                raise PermissionError(f"injected: cannot delete {url}/{name_prefix}*")
            time.sleep(delay)
        return real(self, url, name_prefix)

    session.StorageSession.delete_prefix = delete_prefix  # type: ignore[method-assign]


def _inject_main(argv: list[str]) -> int:
    from ckptbench.workload.rank import worker
    from ckptbench.workload.storage import objects as objectio
    from ckptbench.workload.storage import timing

    config = WorkloadConfig.from_env()
    mode, target = argv[0], int(argv[1])
    if mode == "slow-write":
        # Every save on rank ``target`` spends argv[2] more seconds in write_data.
        if config.rank == target:
            timing.timed_writer = slow_writes(float(argv[2]))  # type: ignore[assignment]
        return worker.run(config)
    if mode in ("slow-delete", "fail-delete"):
        if config.rank == target:
            _break_deletes(mode, float(argv[2]) if len(argv) > 2 else 0.0)
        return worker.run(config)
    first_timed = config.warmups

    def after_save(sample: int, checkpoint_id: str) -> None:
        if sample != first_timed or config.rank != target:
            return
        if mode == "corrupt":
            _corrupt(checkpoint_id, argv[2], target)
        elif mode == "garble-metadata":
            # What a truncated upload or a stray write leaves: no pickle DCP can read.
            objectio.write_text(f"{checkpoint_id}/.metadata", "\x80garbled", project=None)
        elif mode == "delete":
            objectio.delete_prefix(
                checkpoint_id, name_prefix=f"__{target}_0.distcp", project=config.project
            )
        else:
            raise AssertionError(f"unknown fault {mode!r}")

    return worker.run(config, after_save=after_save)


if __name__ == "__main__":
    from ckptbench.workload.rank.worker import end_rank

    end_rank(_inject_main(sys.argv[1:]))
