"""A rank with no memory limit checks against what the node still has (MemAvailable) before it
allocates anything: a llama3-405b shard on one rank reached 9.3 GB resident in 24 s and kept
climbing before."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.rank import worker
from ckptbench.workload.rank.process import memory
from tests import workers

GIB = 1024**3


def _config(**more: object) -> WorkloadConfig:
    return WorkloadConfig(
        model="llama3-405b", world_size=1, backend="file", checkpoint_path="/x", **more
    )


def test_without_a_limit_the_node_s_available_memory_is_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(memory, "cgroup_limit_bytes", lambda: None)
    monkeypatch.setattr(memory, "available_bytes", lambda: 16 * GIB)
    monkeypatch.setattr(memory, "resident_bytes", lambda: GIB // 2)
    refused = worker._memory_refusal(_config())
    assert refused is not None
    assert refused.startswith("a rank needs about 4.45 TiB"), refused
    said = "but has 16.50 GiB (no memory limit: 16.00 GiB available on this node (MemAvailable) "
    assert said + "+ 512.00 MiB this rank already holds)" in refused, refused
    # What fits is not refused, and a forced run is not checked.
    monkeypatch.setattr(memory, "available_bytes", lambda: 1 << 50)
    assert worker._memory_refusal(_config()) is None
    monkeypatch.setattr(memory, "available_bytes", lambda: 16 * GIB)
    assert worker._memory_refusal(_config(memory_check=False)) is None


def test_the_worker_refuses_a_405b_shard_on_one_rank_quickly_naming_the_figures(
    tmp_path: Path,
) -> None:
    env = workers.base_env()
    env.update(
        CKPTBENCH_MODEL="llama3-405b",
        CKPTBENCH_WORLD_SIZE="1",
        CKPTBENCH_BACKEND="file",
        CKPTBENCH_CHECKPOINT_PATH=str(tmp_path / "ckpt"),
        CKPTBENCH_TERMINATION_LOG="",
    )
    started = time.monotonic()
    proc = subprocess.run(
        workers.WORKER, cwd=workers.ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    took = time.monotonic() - started
    assert proc.returncode == worker.EXIT_CONFIG, proc.stderr
    assert "refused: a rank needs about 4.45 TiB" in proc.stderr, proc.stderr
    if memory.cgroup_limit_bytes() is None:  # this machine: no limit, so the node's memory
        assert "available on this node (MemAvailable)" in proc.stderr, proc.stderr
    assert "CKPTBENCH_MEMORY_CHECK=false" in proc.stderr
    assert not (tmp_path / "ckpt").exists()  # nothing written: it never started
    assert took < 60, f"took {took:.0f} s"  # an interpreter and torch's import, no allocation
