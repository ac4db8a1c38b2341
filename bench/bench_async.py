"""What a checkpoint costs training: sync vs thread vs process saves, each CPU stager, on file and
on gcs (the embedded emulator), interleaved; the stall against the memory-copy floor measured in
the same run; and the step overhead per checkpoint interval for K = 1, 10 and 100.

Part 1 (saves), each round runs every case once, in order, ``--rounds`` times (A B C ... A B C):
sync; thread and process, each with the blocking stager and DCP's DefaultStager (plain, shared
memory, async staging, both). One case is one ``ckptbench run`` on 2 ranks. Per case: the median
over rounds of the slowest rank's mean stall and background, with the spread (min-max); the
floor is the rank's shard bytes / this node's memory-copy bandwidth (a ``copy_`` into a touched
tensor, median of 5, measured before every round: the copy a stager makes at best), and a
second floor for a copy into fresh memory (``clone``: page faults included, what a stager that
allocates pays). Ratios from the same round: stall / floor and background / the sync save of
the same bytes (its mean collective seconds).

Targets (issue 20): the process checkpointer with the best CPU stager: stall <= 1.5 x floor;
thread and process: background <= 1.2 x the sync save.

Part 2 (training), K = 1, 10, 100: sync, thread and process (blocking stager) with a training
step of ``--step-ms`` beside the saves, on file and gcs, interleaved; prints the overhead per
interval (slowest rank's mean), the step time with and without a save in flight, the wait and the
stall. No target: it is the finding.

Run: ``.venv/bin/python bench/bench_async.py [--rounds 3] [--layer-size 10000] [--only TEXT]
[--part saves|training|both]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

MIB = 1024**2
BACKENDS = ("file", "gcs")
STAGERS: list[tuple[str, list[str]]] = [
    ("blocking", []),
    ("default", ["--stager", "default"]),
    ("default+shm", ["--stager", "default", "--staging-shared-memory"]),
    ("default+async", ["--stager", "default", "--staging-async"]),
    ("default+shm+async", ["--stager", "default", "--staging-shared-memory", "--staging-async"]),
]
EVERY = (1, 10, 100)


def save_cases() -> list[tuple[str, list[str]]]:
    cases = [("sync", ["--save-mode", "sync"])]
    for mode in ("thread", "process"):
        cases += [(f"{mode} {name}", ["--save-mode", mode, *args]) for name, args in STAGERS]
    return cases


def run(argv: Sequence[str], timeout: float = 1800) -> dict[str, Any]:
    """One ``ckptbench run``; its one cell's summary from --json."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, "-m", "ckptbench.cli", "run", *argv, "--json", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-3000:])
            raise SystemExit(f"ckptbench run failed ({proc.returncode}): {' '.join(argv)}")
        summary: dict[str, Any] = json.loads(out.read_text())["runs"][0]
    if summary.get("verified") is not True:
        raise SystemExit(f"not verified: {' '.join(argv)}")
    return summary


def storage(backend: str, tmp: str) -> list[str]:
    # file: a folder here; gcs: no --storage, so the embedded emulator is started for the run.
    return ["--backend", "file", "--storage", tmp] if backend == "file" else ["--backend", "gcs"]


def copy_floors(nbytes: int, repeats: int = 5) -> tuple[float, float]:
    """Seconds to copy ``nbytes`` into touched memory (memcpy bandwidth) and into fresh memory
    (clone: allocation and page faults included), medians of ``repeats``."""
    src = torch.rand(nbytes // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch every page of the destination
    touched, fresh = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        touched.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        clone = src.clone()
        fresh.append(time.perf_counter() - t0)
        del clone
    return statistics.median(touched), statistics.median(fresh)


def spread(xs: Sequence[float]) -> str:
    return f"{statistics.median(xs):7.3f} ({min(xs):.3f}-{max(xs):.3f})"


def part_saves(args: argparse.Namespace) -> None:
    size = ["--layer-size", str(args.layer_size), "--padding-size", "8", "--world-size", "2"]
    runs = ["--samples", str(args.samples), "--warmup", "1"]
    cases = [(b, n, a) for b in BACKENDS for n, a in save_cases() if args.only in f"{b} {n}"]
    stall: dict[str, list[float]] = {}
    background: dict[str, list[float]] = {}
    save: dict[str, list[float]] = {}
    vs_floor: dict[str, list[float]] = {}
    vs_fresh: dict[str, list[float]] = {}
    vs_sync: dict[str, list[float]] = {}
    floors: list[tuple[float, float, int]] = []
    for r in range(args.rounds):
        sync_this_round: dict[str, float] = {}
        shard = 0
        for backend, name, extra in cases:
            key = f"{backend} {name}"
            with tempfile.TemporaryDirectory() as tmp:
                s = run([*size, *runs, *storage(backend, tmp), *extra])
            shard = int(s["shard_bytes"])
            if not floors or floors[-1][2] != r:
                floor, fresh = copy_floors(shard)
                floors.append((floor, fresh, r))
            floor, fresh, _ = floors[-1]
            save.setdefault(key, []).append(s["save"]["mean_seconds"])
            if name == "sync":
                sync_this_round[backend] = s["save"]["mean_seconds"]
            if s["save"].get("stall"):
                st = s["save"]["stall"]["slowest_rank_seconds"]
                bg = s["save"]["background"]["slowest_rank_seconds"]
                stall.setdefault(key, []).append(st)
                background.setdefault(key, []).append(bg)
                vs_floor.setdefault(key, []).append(st / floor)
                vs_fresh.setdefault(key, []).append(st / fresh)
                if backend in sync_this_round:
                    vs_sync.setdefault(key, []).append(bg / sync_this_round[backend])
            print(f"round {r + 1} {key}: save {s['save']['mean_seconds']:.3f} s", flush=True)
    shard_mib = shard / MIB
    touched = [f[0] for f in floors]
    fresh_floor = [f[1] for f in floors]
    print(f"\nshard {shard_mib:.0f} MiB per rank, 2 ranks, {args.rounds} rounds interleaved")
    print(
        f"memory-copy floor (touched) {spread(touched)} s = "
        f"{shard / statistics.median(touched) / 1024**3:.2f} GiB/s; "
        f"into fresh memory {spread(fresh_floor)} s"
    )
    header = (
        f"{'case':28} {'save s':>22} {'stall s':>22} {'background s':>22} "
        f"{'stall/floor':>22} {'stall/fresh':>22} {'bg/sync save':>22}"
    )
    print(header)
    for backend, name, _ in cases:
        key = f"{backend} {name}"
        cells = [spread(save[key])]
        for table in (stall, background, vs_floor, vs_fresh, vs_sync):
            cells.append(spread(table[key]) if key in table else f"{'-':>22}")
        print(f"{key:28} " + " ".join(f"{c:>22}" for c in cells))
    for backend in BACKENDS:
        best = min(
            (k for k in vs_floor if k.startswith(f"{backend} process")),
            key=lambda k: statistics.median(vs_floor[k]),
            default=None,
        )
        if best is not None:
            ratio = statistics.median(vs_floor[best])
            verdict = "met" if ratio <= 1.5 else "NOT met"
            print(f"target {backend}: best process stager {best}: stall/floor {ratio:.2f} "
                  f"(<= 1.5: {verdict})")  # fmt: skip
        for key in sorted(k for k in vs_sync if k.startswith(backend)):
            ratio = statistics.median(vs_sync[key])
            verdict = "met" if ratio <= 1.2 else "NOT met"
            print(f"target {key}: background/sync {ratio:.2f} (<= 1.2: {verdict})")


def part_training(args: argparse.Namespace) -> None:
    size = ["--layer-size", str(args.layer_size), "--padding-size", "8", "--world-size", "2"]
    runs = ["--samples", str(args.intervals), "--warmup", "0", "--train-step-ms", str(args.step_ms)]
    cases = [
        (b, mode, k)
        for k in EVERY
        for b in BACKENDS
        for mode in ("sync", "thread", "process")
        if args.only in f"{b} {mode} K={k}"
    ]
    results: dict[str, list[dict[str, Any]]] = {}
    for r in range(args.train_rounds):
        for backend, mode, k in cases:
            key = f"{backend} {mode} K={k}"
            with tempfile.TemporaryDirectory() as tmp:
                s = run([*size, *runs, *storage(backend, tmp), "--save-mode", mode,
                         "--train-every", str(k)])  # fmt: skip
            results.setdefault(key, []).append(s["train"])
            print(f"round {r + 1} {key}: overhead {100 * s['train']['overhead']:.1f}%", flush=True)
    print(f"\ntraining step ~{args.step_ms} ms beside the saves, {args.intervals} intervals, "
          f"{args.train_rounds} round(s); medians over rounds")  # fmt: skip
    print(f"{'case':22} {'overhead %':>11} {'step ms':>8} {'in flight ms':>13} {'wait s':>8} "
          f"{'stall s':>8} {'matrix':>7} {'threads/cpus':>13}")  # fmt: skip
    for backend, mode, k in cases:
        key = f"{backend} {mode} K={k}"
        ts = results[key]

        def med(get: Any, ts: list[dict[str, Any]] = ts) -> float:
            return float(statistics.median(get(t) for t in ts))

        flying = [t["in_flight_step_seconds"] for t in ts if t.get("in_flight_step_seconds")]
        print(
            f"{key:22} {100 * med(lambda t: t['overhead']):11.2f} "
            f"{1000 * med(lambda t: t['step_seconds']):8.2f} "
            f"{(1000 * statistics.median(flying)) if flying else float('nan'):13.2f} "
            f"{med(lambda t: t['wait']['slowest_rank_seconds']):8.3f} "
            f"{med(lambda t: t['stall']['slowest_rank_seconds']):8.3f} "
            f"{ts[0]['matrix']:7d} {ts[0]['step_threads']:>6}/{ts[0]['cpus']:<6}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--layer-size", type=int, default=10_000)
    p.add_argument("--only", default="", help="run the cases whose name contains this")
    p.add_argument("--part", choices=("saves", "training", "both"), default="both")
    p.add_argument("--step-ms", type=int, default=50)
    p.add_argument("--intervals", type=int, default=3)
    p.add_argument("--train-rounds", type=int, default=1)
    args = p.parse_args()
    if args.part in ("saves", "both"):
        part_saves(args)
    if args.part in ("training", "both"):
        part_training(args)


if __name__ == "__main__":
    main()
