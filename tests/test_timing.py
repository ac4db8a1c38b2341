"""Figures that must not lie: per-rank I/O, async blocked time, marked templates, cold reads."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.planner import LoadPlan
from torch.distributed.checkpoint.storage import StorageReader

from ckptbench.workload.contract.choices import CacheMode
from ckptbench.workload.contract.results.figures import summarize
from ckptbench.workload.rank import loop, state
from ckptbench.workload.storage import timing
from tests import workers
from tests.workers import one_rank, slow_writes, small_config

DELAY = 0.8


def _quiet() -> Callable[[str], None]:
    lines: list[str] = []
    return lines.append


@pytest.mark.timeout(120)
def test_a_rank_with_slow_writes_is_named_slowest_by_its_own_io_time(tmp_path: Path) -> None:
    """DCP's closing collectives make barrier-to-barrier time equal on both ranks; I/O is not."""
    config = small_config(str(tmp_path / "ckpt"), warmup_samples=0)
    ranks = workers.run(
        config,
        tmp_path,
        command=[workers.WORKER[0], "-m", "tests.workers", "slow-write", "1", str(DELAY)],
    )
    assert [w.proc.returncode for w in ranks] == [0, 0], workers.logs(ranks)
    fast, slow = (w.result for w in ranks)
    assert fast.save is not None and slow.save is not None
    # Both ranks waited for the slow one: their collective times both include the delay ...
    assert fast.save.stats.mean >= DELAY and slow.save.stats.mean >= DELAY
    # ... but only the slow rank's own I/O does.
    assert fast.save.io.mean < DELAY / 2
    assert slow.save.io.mean - fast.save.io.mean == pytest.approx(DELAY, abs=0.3)
    summary = summarize([fast, slow], config.world_size, config.total_bytes)
    assert summary.save is not None
    assert summary.save.slowest_rank == 1
    assert summary.save.slowest_rank_seconds == slow.save.io.mean
    assert summary.save.rank_io_seconds == [fast.save.io.mean, slow.save.io.mean]
    assert summary.save.min_rank_throughput_bytes_per_second == pytest.approx(
        slow.bytes / slow.save.io.mean
    )


def test_async_blocked_time_ends_before_the_checkpoint_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timing, "timed_writer", slow_writes(DELAY))
    config = one_rank(tmp_path, async_save=True, sample_count=1)
    result = loop.run(config, log=_quiet())
    assert result.error is None and result.verified is True
    save = result.save
    assert save is not None and save.blocked is not None
    assert save.stats.mean >= DELAY and save.io.mean >= DELAY
    assert save.blocked.mean < DELAY / 2


def test_planning_and_io_lie_within_the_collective(tmp_path: Path) -> None:
    result = loop.run(one_rank(tmp_path), log=_quiet())
    for op in (result.save, result.load):
        assert op is not None and op.seconds and op.io_seconds and op.planning_seconds
        for total, io, plan in zip(op.seconds, op.io_seconds, op.planning_seconds, strict=True):
            assert io > 0 and plan > 0 and plan + io <= total
    assert result.save is not None and result.save.finish is not None  # rank 0 wrote .metadata


class _Skipping(timing.TimedReader):
    """A reader that silently reads nothing for one tensor."""

    def __init__(self, inner: StorageReader, skip: str) -> None:
        super().__init__(inner)
        self.skip = skip

    def read_data(self, plan: LoadPlan, planner: Any) -> Any:
        kept = [item for item in plan.items if item.dest_index.fqn != self.skip]
        assert len(kept) < len(plan.items)
        return self.inner.read_data(LoadPlan(kept, plan.storage_data, plan.planner_data), planner)


def test_a_skipped_tensor_fails_verification_even_on_reused_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The template may be the saved shard's memory, already holding the expected values."""
    config = one_rank(tmp_path, sample_count=1)
    expected = state.build_state(config)
    monkeypatch.setattr(
        state, "empty_template", lambda c: {k: v.clone() for k, v in expected.items()}
    )
    monkeypatch.setattr(
        timing, "timed_reader", lambda inner, where="": _Skipping(inner, "dummy_tensor_1")
    )
    result = loop.run(config, log=_quiet())
    assert result.verified is False
    assert result.error is not None and "dummy_tensor_1" in result.error


def _resident_pages(path: Path) -> tuple[int, int]:
    """(pages of ``path`` in the page cache, pages in all), by mincore(2)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]  # fmt: skip
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vec = (ctypes.c_ubyte * pages)()
            assert libc.mincore(ctypes.c_void_p(addr), size, vec) == 0
            return sum(v & 1 for v in vec), pages
        finally:
            libc.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)


@pytest.mark.parametrize("drop", [True, False])
def test_file_loads_read_the_disk_unless_the_cache_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drop: bool
) -> None:
    config = one_rank(tmp_path, layer_size=2000, drop_cache=drop)
    seen: list[tuple[int, int]] = []
    real = timing.timed_reader

    def check(inner: StorageReader, where: str = "") -> timing.TimedReader:
        # Called after the save and the eviction, before the load reads anything.
        folder = Path(str(inner.path))  # type: ignore[attr-defined]
        seen.append(_resident_pages(folder / "__0_0.distcp"))
        return real(inner, where)

    monkeypatch.setattr(timing, "timed_reader", check)
    result = loop.run(config, log=_quiet())
    assert result.error is None and result.verified is True
    assert result.cache is (CacheMode.DROPPED if drop else CacheMode.KEPT)
    assert len(seen) == 2
    for resident, pages in seen:
        assert pages > 1000
        if drop:
            assert resident == 0
        else:
            assert resident > pages // 2


def test_timed_writer_stays_an_async_stager_when_its_writer_is_one(tmp_path: Path) -> None:
    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.staging import AsyncStager

    wrapped = timing.timed_writer(FileSystemWriter(str(tmp_path)))
    assert isinstance(wrapped, AsyncStager)
    staged = wrapped.stage({"x": torch.ones(3)})
    assert torch.equal(staged["x"], torch.ones(3))


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs: a real full disk. Needs root (CI runs as root, and must not skip it)."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the full-disk test needs root to mount a small tmpfs")
        pytest.skip("the full-disk test needs root to mount a small tmpfs")
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_is_named_and_its_partial_shards_removed(tiny_disk: Path) -> None:
    # 3 tensors of 2 MB: the shard does not fit in 4 MiB.
    config = one_rank(tiny_disk, layer_size=500, sample_count=1)
    result = loop.run(config, log=_quiet())
    assert result.error is not None and result.save is None
    assert "ENOSPC" in result.error and config.checkpoint_id(0) in result.error, result.error
    assert "unexpected pos" not in result.error
    left = [p for p in Path(config.checkpoint_id(0)).glob("*") if p.name.startswith("__")]
    assert left == []
    assert os.statvfs(tiny_disk).f_bfree * os.statvfs(tiny_disk).f_frsize > 3 * 1024**2
