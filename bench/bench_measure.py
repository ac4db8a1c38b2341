"""Do the figures mean what they say? Each printed beside what it is checked against.

1. Per-rank I/O on an uneven run: 2 ranks, rank 0 holding twice rank 1's bytes (``file``
   backend, on tmpfs and on the disk). DCP ends its save and load with collectives, so
   barrier-to-barrier seconds are the same on both ranks; each rank's own I/O, timed inside the
   storage layer, must not be: on tmpfs, where a rank's writes cost only its own CPU and memory
   bandwidth, the heavier rank's I/O must be clearly the larger (target: rank 0 / rank 1 >= 1.5).
   On the disk, printed beside it and not judged, the ranks share one device: one rank's fsync
   may also flush the other's data (ext4 commits one journal), which can bring their save I/O
   close together in one run and not in the next.
2. ``file`` backend against raw I/O of the same bytes, cold: one rank; ``ckptbench run`` (its
   loads evict the files from the page cache first, ``cache: dropped``) interleaved with a raw
   sequential write + fsync and a raw read after evicting the file, into fresh memory as DCP
   loads into a fresh template. Rounds A B A B ...; medians, spread and the median of the
   per-round ratios. Targets: save / raw write >= 0.9, load / raw cold read >= 0.9.
3. ``gcs`` vs ``gcsfs`` on the embedded emulator, gcsfs run as the reference runs it
   (``sync_files=False``) and handicapped as before (``sync_files=True``: fsspec files have no
   fileno, so DCP calls ``os.sync()`` per file inside the timed save), interleaved by round.

Run: ``.venv/bin/python bench/bench_measure.py`` (several minutes with the defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import rawio

from ckptbench.workload.contract import sizes
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.storage.cache import evict_file

GIB = 1024**3
MIB = 1024**2
TARGET_IMBALANCE = 1.5
TARGET_FILE_RATIO = 0.9


def ckptbench_run(argv: Sequence[str], out: Path, env: dict[str, str] | None = None) -> Any:
    cmd = [sys.executable, "-m", "ckptbench.cli", "run", *argv, "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:] + proc.stdout[-4000:])
        raise SystemExit(f"ckptbench run failed with exit code {proc.returncode}: {argv}")
    return json.loads(out.read_text())


def spread(xs: Sequence[float]) -> str:
    return f"median {statistics.median(xs):.3f} (min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)})"


def verdict(value: float, target: float) -> str:
    return "meets target" if value >= target else "MISSES target"


# -- 1. uneven ranks ------------------------------------------------------------------------------


def bench_uneven(
    root: Path, shm: Path | None, layer_size: int, samples: int
) -> list[tuple[str, float, float]]:
    """On tmpfs (judged: each rank's writes cost its own CPU and memory bandwidth) and on the
    disk beside it (a shared device, where one rank's fsync may flush the other's data too)."""
    out: list[tuple[str, float, float]] = []
    places = [("tmpfs", shm), ("disk", root)] if shm is not None else [("disk", root)]
    for where, base in places:
        assert base is not None
        print(
            f"1. uneven 2-rank run, file backend on {where} ({base}): rank 0 holds 2 tensors, "
            "rank 1 holds 1",
            flush=True,
        )
        folder = base / f"uneven-{os.getpid()}"
        try:
            doc = ckptbench_run(
                ["--storage", f"file://{folder}", "--world-size", "2", "--padding-size", "3",
                 "--layer-size", str(layer_size), "--samples", str(samples), "--warmup", "1"],
                root / f"uneven-{where}.json",
            )  # fmt: skip
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        [run] = doc["runs"]
        for op in ("save", "load"):
            s = run[op]
            io = s["rank_io_seconds"]
            plan, overhead = s["planning_mean_seconds"], s["collective_overhead_seconds"]
            print(
                f"   {op}: collective mean {s['mean_seconds']:.3f} s (same on both ranks); "
                f"I/O rank 0 {io[0]:.3f} s, rank 1 {io[1]:.3f} s; planning {plan:.3f} s; "
                f"collective overhead {overhead:.3f} s; slowest rank {s['slowest_rank']}",
                flush=True,
            )
            if where == places[0][0]:
                out.append(
                    (f"{op} ({where}): rank 0 I/O / rank 1 I/O", io[0] / io[1], TARGET_IMBALANCE)
                )
    return out


# -- 2. file vs raw, cold ------------------------------------------------------------------------


def raw_round(folder: Path, tensor_bytes: int, tensors: int) -> tuple[float, float]:
    """(write+fsync seconds, cold read seconds) of ``tensors`` buffers to and from one file."""
    path = folder / "raw.bin"
    t0 = time.perf_counter()
    rawio.write(path, rawio.pattern(tensor_bytes), tensors)
    write = time.perf_counter() - t0
    evict_file(path)
    t0 = time.perf_counter()
    rawio.read(path, tensor_bytes, tensors)
    read = time.perf_counter() - t0
    path.unlink()
    return write, read


def bench_file_vs_raw(
    root: Path, layer_size: int, tensors: int, samples: int, rounds: int
) -> list[tuple[str, float, float]]:
    shard = sizes.total_bytes(layer_size, tensors)
    tensor = sizes.tensor_bytes(layer_size)
    print(
        f"2. file backend vs raw I/O, cold reads: 1 rank, {tensors} tensors, "
        f"{sizes.format_bytes(shard)}; {rounds} rounds of (ckptbench run: {samples} samples "
        "+ 1 warm-up, then raw)",
        flush=True,
    )
    ours_w: list[float] = []
    ours_r: list[float] = []
    raw_w: list[float] = []
    raw_r: list[float] = []
    for i in range(rounds):
        doc = ckptbench_run(
            ["--storage", f"file://{root / f'file-{i}'}", "--world-size", "1",
             "--padding-size", str(tensors), "--layer-size", str(layer_size),
             "--samples", str(samples), "--warmup", "1"],
            root / f"file-{i}.json",
        )  # fmt: skip
        [run] = doc["runs"]
        assert run["cache"] == "dropped", run.get("cache")
        ours_w.append(shard / run["save"]["p50_seconds"] / GIB)
        ours_r.append(shard / run["load"]["p50_seconds"] / GIB)
        w, r = raw_round(root, tensor, tensors)
        raw_w.append(shard / w / GIB)
        raw_r.append(shard / r / GIB)
    print(f"   ckptbench save GiB/s {spread(ours_w)}; raw write+fsync {spread(raw_w)}", flush=True)
    print(f"   ckptbench load GiB/s {spread(ours_r)}; raw cold read  {spread(raw_r)}", flush=True)
    save_ratios = [a / b for a, b in zip(ours_w, raw_w, strict=True)]
    load_ratios = [a / b for a, b in zip(ours_r, raw_r, strict=True)]
    print(f"   per-round ratios: save {spread(save_ratios)}; load {spread(load_ratios)}")
    return [
        ("file save / raw write+fsync (median ratio)", statistics.median(save_ratios),
         TARGET_FILE_RATIO),
        ("file cold load / raw cold read (median ratio)", statistics.median(load_ratios),
         TARGET_FILE_RATIO),
    ]  # fmt: skip


# -- 3. gcs vs gcsfs, fair and handicapped --------------------------------------------------------


def bench_gcs(root: Path, layer_size: int, tensors: int, samples: int, rounds: int) -> None:
    field = _sync_files_field()
    if field is None:
        print("3. skipped: this version has no setting for gcsfs's sync_files", flush=True)
        return
    print(
        f"3. gcs vs gcsfs on the embedded emulator, 2 ranks, {tensors} tensors of "
        f"{sizes.format_bytes(sizes.tensor_bytes(layer_size))}; {rounds} rounds of "
        "(gcs, gcsfs fair, gcsfs handicapped)",
        flush=True,
    )
    common = ["--world-size", "2", "--padding-size", str(tensors), "--layer-size",
              str(layer_size), "--samples", str(samples), "--warmup", "1"]  # fmt: skip
    figures: dict[str, dict[str, list[float]]] = {}
    for i in range(rounds):
        for label, backend, sync in (
            ("gcs", "gcs", None),
            ("gcsfs fair", "gcsfs", "false"),
            ("gcsfs handicapped", "gcsfs", "true"),
        ):
            extra = ["--sync-files"] if sync == "true" else []
            doc = ckptbench_run(
                [*common, "--backend", backend, *extra], root / f"g-{i}-{label}.json"
            )
            if backend == "gcsfs":
                assert run_setting(doc, field) == (sync == "true"), doc["runs"][0]["extra"]
            [run] = doc["runs"]
            got = figures.setdefault(label, {"save": [], "load": []})
            for op in ("save", "load"):
                got[op].append(run[op]["throughput_bytes_per_second"] / MIB)
    for op in ("save", "load"):
        for label, got in figures.items():
            print(f"   {op} {label:<18} MiB/s {spread(got[op])}", flush=True)
        gcs = figures["gcs"][op]
        for label in ("gcsfs fair", "gcsfs handicapped"):
            ratios = [a / b for a, b in zip(gcs, figures[label][op], strict=True)]
            print(f"   {op} gcs / {label}: {spread(ratios)}", flush=True)


def run_setting(doc: Any, field: str) -> Any:
    settings = doc["runs"][0]["extra"]["settings"]
    return settings.get(field)


def _sync_files_field() -> str | None:
    return "sync_files" if "sync_files" in WorkloadConfig.model_fields else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--layer-size", type=int, default=16384, help="default 16384: 64 MiB tensors")
    p.add_argument("--tensors", type=int, default=4, help="tensors of the one-rank file run")
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", type=Path, help="folder for the file runs (default: a temp folder)")
    p.add_argument("--skip", default="", help="comma list of parts to skip: 1, 2, 3")
    a = p.parse_args()
    skip = set(a.skip.split(","))
    print(f"ckptbench measurement bench, {os.cpu_count()} CPUs. GiB = 1024^3 bytes.", flush=True)
    results: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="ckptbench-bench-", dir=a.dir) as tmp:
        root = Path(tmp)
        if "1" not in skip:
            shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
            results += bench_uneven(root, shm, a.layer_size, a.samples)
        if "2" not in skip:
            results += bench_file_vs_raw(root, a.layer_size, a.tensors, a.samples, a.rounds)
        if "3" not in skip:
            bench_gcs(root, a.layer_size // 4, 8, a.samples, a.rounds)
    print()
    for name, value, target in results:
        print(f"{name:<52} {value:>8.2f}   target >= {target:<5} {verdict(value, target)}")
    return 0 if all(v >= t for _, v, t in results) else 1


if __name__ == "__main__":
    sys.exit(main())
