"""What the rank's allocator setting costs: a fixed 1 MiB mmap threshold, glibc's defaults, and
glibc's defaults with ``malloc_trim`` once each saved shard is dropped (untimed).

Two parts, each run A B C A B C (whole ``ckptbench run`` invocations interleaved), medians and
spread (min..max) printed per arm, with ratios of medians and per-round ratios:

1. ``own``: ckptbench's own procedure on the ``file``, ``gcs`` and ``gcsfs`` backends at small
   sizes; save and load mean seconds and the largest per-rank peak RSS. Each arm is the workload
   as shipped except for ``memory.POLICY_BY_PROCEDURE``, set for the arm in each rank (this
   script re-runs itself as the rank: ``--rank ARM``), so every arm runs the same code path.
2. ``reference``: ``--procedure reference --backend gcsfs`` (the reference's sizes: 2 ranks,
   layer size 2000, padding 8, 4 samples, OMP_NUM_THREADS=1) as shipped (glibc's defaults)
   against the same with ``MALLOC_MMAP_THRESHOLD_=1048576``, the old setting, forced.

Run: ``.venv/bin/python bench/bench_allocator.py [--part own|reference|both] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MIB = 1024**2
ARMS = ("fixed", "defaults", "trimmed")
OWN_CASES = (
    # (label, run arguments): small shards of 8 MB and 32 MiB tensors
    ("2000x8", ["--layer-size", "2000", "--padding-size", "8"]),
    ("8192x16", ["--layer-size", "8192", "--padding-size", "16"]),
)
BACKENDS = ("file", "gcs", "gcsfs")
REFERENCE_ARGS = [
    "--procedure", "reference", "--backend", "gcsfs", "--world-size", "2",
    "--layer-size", "2000", "--padding-size", "8", "--samples", "4",
]  # fmt: skip


def rank_main(arm: str) -> int:
    """One rank, with this arm's threshold for every procedure (the rest as shipped)."""
    from ckptbench.workload.rank import worker
    from ckptbench.workload.rank.process import memory

    policy = {
        "fixed": memory.FIXED_1MIB,
        "defaults": memory.DEFAULTS,
        "trimmed": memory.DEFAULTS_TRIMMED,
    }[arm]
    for procedure in memory.POLICY_BY_PROCEDURE:
        memory.POLICY_BY_PROCEDURE[procedure] = policy
    return worker.main([])


def cli_main(arm: str, argv: Sequence[str]) -> int:
    """``ckptbench run`` whose ranks are this script's ``--rank ARM``."""
    from ckptbench.workload.local import cli, runner

    command = (sys.executable, os.path.abspath(__file__), "--rank", arm)
    setattr(cli, "run_ranks", functools.partial(runner.run_ranks, command=command))  # noqa: B010
    return cli.main(list(argv))


def one_run(argv: Sequence[str], arm: str | None, env: dict[str, str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        args = [*argv, "--json", str(out)]
        if arm is None:
            cmd = [sys.executable, "-m", "ckptbench.cli", "run", *args]
        else:
            cmd = [sys.executable, os.path.abspath(__file__), "--cli", arm, *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-3000:])
            raise SystemExit(f"run failed ({proc.returncode}): {' '.join(cmd)}")
        run: dict[str, Any] = json.loads(out.read_text())["runs"][0]
    peaks = [p for p in run["extra"]["peak_rss_bytes"] if p]
    return {
        "save": float(run["save"]["mean_seconds"]),
        "load": float(run["load"]["mean_seconds"]),
        "peak": max(peaks) / MIB,
    }


def spread(xs: Sequence[float], fmt: str = ".3f") -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}..{max(xs):{fmt}})"


def report(label: str, runs: dict[str, list[dict[str, float]]], a: str, b: str) -> None:
    """Medians (min..max) per arm, the ratio a / b of medians and the paired per-round ratios."""
    for key, fmt in (("save", ".3f"), ("load", ".3f"), ("peak", ".0f")):
        xa = [r[key] for r in runs[a]]
        xb = [r[key] for r in runs[b]]
        paired = [x / y for x, y in zip(xa, xb, strict=True)]
        unit = "MiB" if key == "peak" else "s"
        print(
            f"  {label:<16} {key:<4} {a} {spread(xa, fmt)} {unit} | {b} {spread(xb, fmt)} {unit}"
            f" | {a}/{b} {statistics.median(xa) / statistics.median(xb):.2f}"
            f" (per round {min(paired):.2f}..{max(paired):.2f})",
            flush=True,
        )


def part_own(rounds: int, samples: int) -> None:
    print(f"== ckptbench procedure: {', '.join(ARMS)}, {rounds} rounds", flush=True)
    env = dict(os.environ)
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    for label, size_args in OWN_CASES:
        for backend in BACKENDS:
            runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
            with tempfile.TemporaryDirectory(dir="/var/tmp") as storage:
                where = ["--storage", storage] if backend == "file" else ["--backend", backend]
                argv = [*size_args, *where, "--world-size", "2", "--samples", str(samples)]
                for _ in range(rounds):
                    for arm in ARMS:
                        runs[arm].append(one_run(argv, arm, env))
            report(f"{backend} {label}", runs, "fixed", "defaults")
            report(f"{backend} {label}", runs, "trimmed", "defaults")


def part_reference(rounds: int) -> None:
    print(f"== reference procedure, gcsfs: forced 1 MiB vs as shipped, {rounds} rounds", flush=True)
    shipped = dict(os.environ, OMP_NUM_THREADS="1")
    shipped.pop("MALLOC_MMAP_THRESHOLD_", None)
    forced = dict(shipped, MALLOC_MMAP_THRESHOLD_=str(1 << 20))
    runs: dict[str, list[dict[str, float]]] = {"forced": [], "shipped": []}
    for _ in range(rounds):
        runs["forced"].append(one_run(REFERENCE_ARGS, None, forced))
        runs["shipped"].append(one_run(REFERENCE_ARGS, None, shipped))
    report("reference gcsfs", runs, "forced", "shipped")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--rank"]:
        return rank_main(args[1])
    if args[:1] == ["--cli"]:
        return cli_main(args[1], args[2:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--part", choices=("own", "reference", "both"), default="both")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the own part (default 3)")
    p.add_argument("--reference-rounds", type=int, default=6)
    p.add_argument("--samples", type=int, default=3)
    ns = p.parse_args(args)
    if ns.part in ("own", "both"):
        part_own(ns.rounds, ns.samples)
    if ns.part in ("reference", "both"):
        part_reference(ns.reference_rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
