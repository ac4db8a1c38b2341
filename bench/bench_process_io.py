"""A process save's I/O, now timed in the checkpointer process, against what the rank used to
report for it (the background time, an upper bound) and against the sync and thread saves' I/O.

Each round runs every case once, in order (A B C ... A B C): sync, thread and process, the
blocking stager, on file and on gcs (the embedded emulator), 2 ranks. Per case: the median over
rounds (min-max) of the slowest rank's save I/O and, for async saves, its background time.
Ratios from the same round: process I/O / process background (how far the old figure was from
the true one) and each mode's I/O / the sync save's I/O (the same bytes, the same writer).

Run: ``.venv/bin/python bench/bench_process_io.py [--rounds 3] [--layer-size 10000]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from bench_async import run, spread, storage

BACKENDS = ("file", "gcs")
MODES = ("sync", "thread", "process")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--layer-size", type=int, default=10_000)
    p.add_argument("--samples", type=int, default=3)
    args = p.parse_args()
    size = ["--layer-size", str(args.layer_size), "--padding-size", "8", "--world-size", "2"]
    runs = ["--samples", str(args.samples), "--warmup", "1"]
    io: dict[str, list[float]] = {}
    background: dict[str, list[float]] = {}
    io_vs_background: dict[str, list[float]] = {}
    io_vs_sync: dict[str, list[float]] = {}
    shard = 0
    for r in range(args.rounds):
        for backend in BACKENDS:
            sync_io = None
            for mode in MODES:
                key = f"{backend} {mode}"
                with tempfile.TemporaryDirectory() as tmp:
                    s = run([*size, *runs, *storage(backend, tmp), "--save-mode", mode])
                shard = int(s["shard_bytes"])
                rank_io = float(s["save"]["slowest_rank_seconds"])
                io.setdefault(key, []).append(rank_io)
                if mode == "sync":
                    sync_io = rank_io
                elif sync_io:
                    io_vs_sync.setdefault(key, []).append(rank_io / sync_io)
                if s["save"].get("background"):
                    bg = float(s["save"]["background"]["slowest_rank_seconds"])
                    background.setdefault(key, []).append(bg)
                    io_vs_background.setdefault(key, []).append(rank_io / bg)
                print(f"round {r + 1} {key}: I/O {rank_io:.3f} s", flush=True)
    print(f"\n{shard / 1024**2:.0f} MiB a rank, 2 ranks, {args.rounds} rounds, medians (min-max)")
    print(f"{'case':16} {'I/O s':>22} {'background s':>22} {'I/O/background':>22} {'I/O/sync':>22}")
    for backend in BACKENDS:
        for mode in MODES:
            key = f"{backend} {mode}"
            cells = [spread(io[key])]
            for table in (background, io_vs_background, io_vs_sync):
                cells.append(spread(table[key]) if key in table else f"{'-':>22}")
            print(f"{key:16} " + " ".join(f"{c:>22}" for c in cells))
    file_ratio = statistics.median(io_vs_background["file process"])
    gcs_ratio = statistics.median(io_vs_background["gcs process"])
    print(f"median process I/O / background: {file_ratio:.2f} (file), {gcs_ratio:.2f} (gcs)")


if __name__ == "__main__":
    main()
