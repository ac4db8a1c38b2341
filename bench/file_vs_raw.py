"""Part 2 of ``bench_measure``: the ``file`` backend against raw I/O of the same byte count, cold.

Run by ``bench_measure.py`` as a child process (``file_vs_raw.py --json OUT ...``). ckptbench
samples and raw samples alternate, whole, in this process:

    ckptbench warm-up, raw 0, ckptbench 1, raw 1, ckptbench 2, raw 2, ..., ckptbench N, raw N

A ckptbench sample is one rank run as ``ckptbench worker`` runs it (``worker.run``: its memory
settings, a one-rank gloo group, the timed loop, its results), one sample, no warm-up (the warm-up
run before it did that): save (DCP's FileSystemWriter, fsync), evict, cold load, verify, delete.
A raw sample (:mod:`rawio`, the yardstick ``bench_workload`` uses too) does the same to as many
payload bytes: written in tensor-sized writes and fsynced, evicted, read back cold a tensor at a
time into freshly mapped memory (as ``torch.load`` reads each item into a new buffer), deleted.
So each write follows the other side's delete, and each read its own write, as on the other side:
that matters on a virtual disk, where a write right after another write + fsync ran 1.4-3x slower
here than one after a read, and data read soon after it was written read faster than older data.
Each ckptbench sample ``k`` is compared with the mean seconds of raw samples ``k - 1`` and ``k``,
just before and just after it (A B A B ...: a drift cancels).

What is checked on the way, so that the ratio means what it says:

- eviction: the loop's own ``cache.evict`` call is observed; the checkpoint's resident bytes
  (``mincore``) just before it (the save left them cached) and just after it (must be 0);
- first touch: ``state.mark_unwritten`` fills the template before the timed load, so the load
  does not pay for first-touching it;
- where DCP's load time goes: the seconds DCP's reader spends inside ``read``/``readinto`` of its
  file streams (the read system calls, and the page faults of ``torch.load``'s fresh buffers)
  against the rest of its I/O phase (``torch.load``'s parsing and the copy into the template; a
  warm copy of the same bytes is timed apart for scale).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import socket
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import rawio
import torch
from torch.distributed.checkpoint.filesystem import FileSystem

from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.choices import CacheMode
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.rank import worker
from ckptbench.workload.storage.file import cache
from ckptbench.workload.storage.file.backend import ReportingFileSystem

GIB = 1024**3
PAGE = mmap.PAGESIZE
TARGET_RATIO = 0.9


@dataclass(frozen=True)
class Judged:
    """A figure with its target: ``value >= target``, or ``value <= target`` when ``at_most``."""

    name: str
    value: float
    target: float
    at_most: bool = False

    @property
    def met(self) -> bool:
        return self.value <= self.target if self.at_most else self.value >= self.target

    def line(self) -> str:
        sign = "<=" if self.at_most else ">="
        verdict = "meets target" if self.met else "MISSES target"
        return f"{self.name:<52} {self.value:>8.2f}   target {sign} {self.target:<5} {verdict}"


# -- resident pages ------------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]  # fmt: skip
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
_MAP_FAILED = ctypes.c_void_p(-1).value


def resident_bytes(path: Path) -> int:
    """How many of ``path``'s bytes are in this node's page cache (``mincore``), page-rounded."""
    size = path.stat().st_size
    if size == 0:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
        try:
            pages = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
            return min(size, (pages - bytes(vec).count(0)) * PAGE)
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def folder_resident(folder: Path) -> int:
    return sum(resident_bytes(p) for p in folder.iterdir() if p.is_file())


# -- DCP's read calls ------------------------------------------------------------------------------


@dataclass
class Reads:
    seconds: float = 0.0
    nbytes: int = 0
    calls: int = 0


class _TimedStream:
    """A file stream whose reads, writes and fsync are timed; everything else is forwarded.

    DCP's writer syncs a data file with ``os.fsync(stream.fileno())`` and then closes it, so the
    fsync is timed from the ``fileno`` call to the end of the stream's ``with`` block."""

    def __init__(self, inner: Any, into: Callable[[], Reads], writes: Callable[[], Reads]) -> None:
        self._inner = inner
        self._into = into
        self._writes = writes
        self.fileno_at: float | None = None

    def readinto(self, buffer: Any) -> int:
        t0 = time.perf_counter()
        got = int(self._inner.readinto(buffer) or 0)
        self._count(self._into(), t0, got)
        return got

    def read(self, size: int = -1) -> bytes:
        t0 = time.perf_counter()
        data: bytes = self._inner.read(size)
        self._count(self._into(), t0, len(data))
        return data

    def write(self, data: Any) -> int:
        t0 = time.perf_counter()
        n = int(self._inner.write(data) or 0)
        self._count(self._writes(), t0, n)
        return n

    def fileno(self) -> int:
        self.fileno_at = time.perf_counter()
        return int(self._inner.fileno())

    @staticmethod
    def _count(calls: Reads, t0: float, got: int) -> None:
        calls.seconds += time.perf_counter() - t0
        calls.nbytes += got
        calls.calls += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@contextmanager
def timed_dcp_io(
    reads: Callable[[], Reads], writes: Callable[[], Reads], fsync: Callable[[float], None]
) -> Iterator[None]:
    """Time the reads, writes and fsync of every data file DCP's ``FileSystem`` opens (public
    API: ``FileSystemReader``/``Writer`` open their files through ``FileSystem.create_stream``).
    The file backend's writer opens its files through ``ReportingFileSystem``, whose own
    ``create_stream`` handles writes and hands reads to ``FileSystem``'s: it is timed for writes
    only, so no byte is counted twice."""

    def timed(original: Any, writes_only: bool) -> Any:
        @contextmanager
        def create_stream(self: FileSystem, path: Any, mode: str) -> Iterator[Any]:
            data = str(path).endswith(".distcp")  # not the .metadata
            if not data or (writes_only and not any(c in mode for c in "wax+")):
                with original(self, path, mode) as stream:
                    yield stream
                return
            with original(self, path, mode) as stream:
                stream_timed = _TimedStream(stream, reads, writes)
                yield stream_timed
            if stream_timed.fileno_at is not None:
                fsync(time.perf_counter() - stream_timed.fileno_at)

        return create_stream

    patched = [(FileSystem, False), (ReportingFileSystem, True)]
    originals = [(cls, cls.__dict__["create_stream"]) for cls, _ in patched]
    for cls, writes_only in patched:
        setattr(cls, "create_stream", timed(cls.__dict__["create_stream"], writes_only))  # noqa: B010
    try:
        yield
    finally:
        for cls, original in originals:
            setattr(cls, "create_stream", original)  # noqa: B010


# -- raw I/O ---------------------------------------------------------------------------------------


def warm_copy_seconds(nbytes: int, piece_bytes: int) -> float:
    """A copy of ``nbytes`` between two touched tensor-sized buffers, as DCP's ``copy_``."""
    src = torch.ones(piece_bytes // 4, dtype=torch.float32)
    dst = torch.zeros_like(src)
    t0 = time.perf_counter()
    for _ in range(max(1, round(nbytes / piece_bytes))):
        dst.copy_(src)
    return time.perf_counter() - t0


# -- the run ---------------------------------------------------------------------------------------


@dataclass
class Raw:
    """One raw sample: write + fsync, evict, read cold, delete."""

    write_s: float = 0.0
    fsync_s: float = 0.0
    read_s: float = 0.0
    nbytes: int = 0
    resident_after_evict: int = 0
    copy_s: float = 0.0


@dataclass
class Dcp:
    """One ckptbench sample, as its rank recorded it, with what was observed around its load."""

    save_s: float = 0.0
    load_s: float = 0.0
    io_s: float = 0.0
    planning_s: float = 0.0
    cache: str = ""
    resident_before_evict: int = 0
    resident_after_evict: int = 0
    evictions: int = 0
    save_io_s: float = 0.0
    reads: Reads = field(default_factory=Reads)
    writes: Reads = field(default_factory=Reads)
    fsync_s: float = 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raw_sample(path: Path, piece: int, tensors: int, chunk: memoryview) -> Raw:
    r = Raw(nbytes=piece * tensors)
    t0 = time.perf_counter()
    r.fsync_s = rawio.write(path, chunk, tensors)
    r.write_s = time.perf_counter() - t0
    cache.evict_file(path)
    r.resident_after_evict = resident_bytes(path)
    t0 = time.perf_counter()
    rawio.read(path, piece, tensors)
    r.read_s = time.perf_counter() - t0
    path.unlink()
    r.copy_s = warm_copy_seconds(r.nbytes, piece)
    return r


def dcp_sample(root: Path, name: str, layer_size: int, tensors: int) -> Dcp:
    """One rank, one sample, no warm-up: save, evict, load, verify, delete, as the worker does."""
    config = WorkloadConfig.model_validate(
        {"checkpoint_path": f"file://{root}", "run_id": name, "backend": "file",
         "world_size": 1, "layer_size": layer_size, "padding_size": tensors, "sample_count": 1,
         "warmup_samples": 0, "master_port": _free_port()}
    )  # fmt: skip
    assert config.cache_mode is CacheMode.DROPPED
    d = Dcp()
    real_evict = cache.evict

    def observed_evict(folder: str | os.PathLike[str]) -> int:
        # Observation only: the loop's own eviction runs unchanged, just before the timed load.
        where = Path(folder)
        d.resident_before_evict = folder_resident(where)
        evicted = real_evict(folder)
        d.resident_after_evict = folder_resident(where)
        d.evictions += 1
        return evicted

    cache.evict = observed_evict
    try:

        def synced(seconds: float) -> None:
            d.fsync_s += seconds

        with timed_dcp_io(lambda: d.reads, lambda: d.writes, synced), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = worker.run(config)
    finally:
        cache.evict = real_evict
    if code != worker.EXIT_OK:
        raise SystemExit(f"the ckptbench rank failed (exit {code}); its log is above")
    if d.evictions != 1:
        raise SystemExit(f"the loop evicted {d.evictions} times before its one load, not once")
    result = json.loads(Path(config.results_path, "rank-00000.json").read_text())
    [d.save_s], [d.load_s] = result["save"]["seconds"], result["load"]["seconds"]
    [d.io_s], [d.planning_s] = result["load"]["io_seconds"], result["load"]["planning_seconds"]
    [d.save_io_s] = result["save"]["io_seconds"]
    d.cache = result["cache"]
    return d


def run(root: Path, layer_size: int, tensors: int, rounds: int) -> dict[str, Any]:
    piece = sizes.tensor_bytes(layer_size)
    chunk = rawio.pattern(piece)
    raw: list[Raw] = []
    dcp: list[Dcp] = []
    dcp_sample(root, "warm-up", layer_size, tensors)  # imports, DCP's first call: not kept
    raw.append(raw_sample(root / "raw.bin", piece, tensors, chunk))
    for k in range(1, rounds + 1):
        dcp.append(dcp_sample(root, f"sample-{k}", layer_size, tensors))
        raw.append(raw_sample(root / "raw.bin", piece, tensors, chunk))
    return {
        "shard_bytes": sizes.total_bytes(layer_size, tensors),
        "raw": [asdict(r) for r in raw],
        "dcp": [asdict(d) for d in dcp],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--layer-size", type=int, required=True)
    p.add_argument("--tensors", type=int, required=True)
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--json", type=Path, required=True)
    a = p.parse_args()
    doc = run(a.dir, a.layer_size, a.tensors, a.rounds)
    a.json.write_text(json.dumps(doc))
    return 0


def _bracket(before: float, after: float) -> float:
    return (before + after) / 2


def summarize(doc: dict[str, Any], say: Callable[[str], None]) -> list[Judged]:
    """Print the per-round and median figures; return the judged ones.

    ``dcp[k - 1]`` (timed sample ``k``) ran between ``raw[k - 1]`` and ``raw[k]``.
    """
    shard = doc["shard_bytes"]
    raw, dcp = doc["raw"], doc["dcp"]
    rows: list[dict[str, float]] = []
    for k, d in enumerate(dcp, start=1):
        before, after = raw[k - 1], raw[k]
        write_s = _bracket(before["write_s"], after["write_s"])
        read_s = _bracket(before["read_s"], after["read_s"])
        row = {
            "save": shard / d["save_s"] / GIB, "raw_write": before["nbytes"] / write_s / GIB,
            "load": shard / d["load_s"] / GIB, "raw_read": before["nbytes"] / read_s / GIB,
            "load_s": d["load_s"], "raw_read_s": read_s, "io_s": d["io_s"],
            "planning_s": d["planning_s"], "in_reads_s": d["reads"]["seconds"],
            "copy_s": _bracket(before["copy_s"], after["copy_s"]),
        }  # fmt: skip
        row["save_ratio"] = row["save"] / row["raw_write"]
        row["load_ratio"] = row["load"] / row["raw_read"]
        row["beyond_s"] = row["io_s"] - row["in_reads_s"]
        row["save_s"] = d["save_s"]
        row["save_writes_s"] = d["writes"]["seconds"]
        row["save_fsync_s"] = d["fsync_s"]
        row["save_rest_s"] = d["save_io_s"] - d["writes"]["seconds"] - d["fsync_s"]
        row["raw_writes_s"] = _bracket(
            before["write_s"] - before["fsync_s"], after["write_s"] - after["fsync_s"]
        )
        row["raw_fsync_s"] = _bracket(before["fsync_s"], after["fsync_s"])
        rows.append(row)
        say(
            f"   round {k}: save {row['save']:.3f} vs raw write {row['raw_write']:.3f} GiB/s "
            f"({row['save_ratio']:.2f}); load {row['load']:.3f} vs raw read "
            f"{row['raw_read']:.3f} GiB/s ({row['load_ratio']:.2f}). DCP load {d['load_s']:.2f} s:"
            f" planning {row['planning_s']:.2f}, in read calls {row['in_reads_s']:.2f} (raw read "
            f"{before['read_s']:.2f} before, {after['read_s']:.2f} after), beyond them "
            f"{row['beyond_s']:.2f} (a warm copy of the bytes: {row['copy_s']:.2f}). DCP save "
            f"{d['save_s']:.2f} s: in write calls {row['save_writes_s']:.2f} (raw "
            f"{row['raw_writes_s']:.2f}), fsync {row['save_fsync_s']:.2f} (raw "
            f"{row['raw_fsync_s']:.2f}), the rest of its I/O {row['save_rest_s']:.2f}"
        )

    def med(key: str) -> str:
        xs = [row[key] for row in rows]
        return f"{statistics.median(xs):.3f} (min {min(xs):.3f}, max {max(xs):.3f})"

    say(f"   save GiB/s: ckptbench {med('save')}, raw write+fsync {med('raw_write')}")
    say(f"   load GiB/s: ckptbench {med('load')}, raw cold read {med('raw_read')}")
    say(f"   per-round ratios: save {med('save_ratio')}; load {med('load_ratio')}")
    say(
        f"   a DCP load, median seconds: {med('load_s')}; in its read calls {med('in_reads_s')} "
        f"(the raw read: {med('raw_read_s')}); beyond them {med('beyond_s')} (torch.load's "
        f"parsing and the copy into the template; a warm copy of the same bytes: {med('copy_s')});"
        f" planning {med('planning_s')}"
    )
    say(
        f"   a DCP save, median seconds: {med('save_s')}; in its write calls "
        f"{med('save_writes_s')} (raw: {med('raw_writes_s')}); its fsync {med('save_fsync_s')} "
        f"(raw: {med('raw_fsync_s')}); the rest of its I/O phase (torch.save's serialization) "
        f"{med('save_rest_s')}"
    )
    before = min(d["resident_before_evict"] for d in dcp)
    after = max(d["resident_after_evict"] for d in dcp)
    raw_after = max(r["resident_after_evict"] for r in raw)
    say(
        f"   page cache (mincore): the checkpoint had >= {before / GIB:.2f} GiB resident before "
        f"the loop's eviction and <= {after} bytes after it; the raw file <= {raw_after} bytes "
        f"after its eviction; results say cache: {sorted({d['cache'] for d in dcp})}"
    )
    return [
        Judged("file save / raw write+fsync (median ratio)",
               statistics.median(row["save_ratio"] for row in rows), TARGET_RATIO),
        Judged("file cold load / raw cold read (median ratio)",
               statistics.median(row["load_ratio"] for row in rows), TARGET_RATIO),
        Judged("bytes left in the page cache after eviction", float(after + raw_after), 0.0,
               at_most=True),
    ]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
