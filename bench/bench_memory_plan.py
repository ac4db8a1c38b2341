"""The memory plan against what a rank really uses: estimate vs measured peak RSS, per case.

Each case is one ``ckptbench run`` on 2 ranks; its measured figure is the largest rank's peak
resident set (``ru_maxrss`` from ``wait4``, which the runner reports as ``extra.peak_rss_bytes``);
its estimate is ``WorkloadConfig.memory_estimate()`` for the same settings
(``workload/contract/checkpoint/memory_plan.py``). Printed per case: both, in MiB, the ratio
measured / estimate and whether it is within 10%. Cases: the llama3-debug preset, llama3-8b scaled
to one layer and a 32768 vocabulary (2.72 GiB a rank; ``file`` only, see below), the reference
layout at four sizes, each sync and with ``--async-save``, on ``file`` (a temporary directory) and
on ``gcs`` (the embedded emulator). ``--baseline`` prints the calibration runs the plan's constants
come from instead.

Run: ``.venv/bin/python bench/bench_memory_plan.py [--only SUBSTRING] [--baseline]`` (about 7
minutes for every case on a 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ckptbench.workload.contract.config import WorkloadConfig

MIB = 1024**2
TOLERANCE = 0.10
SMALL = ["--warmup", "1", "--samples", "1"]  # two save/load cycles: what a freed shard leaves
BIG = ["--warmup", "0", "--samples", "1"]
BOTH = ("file", "gcs")
# llama3-8b is not run on the emulator: fake-gcs-server keeps objects (and every composed copy)
# in its own memory, and was killed for lack of it at 12.2 GiB resident on this 24 GiB machine.
STATES: list[tuple[str, dict[str, Any], list[str], tuple[str, ...]]] = [
    ("llama3-debug", {"model": "llama3-debug"}, SMALL, BOTH),
    ("llama3-8b 1 layer", {"model": "llama3-8b", "layers": 1, "vocab": 32768}, BIG, ("file",)),
    ("reference 2000x8", {"layer_size": 2000, "padding_size": 8}, SMALL, BOTH),
    ("reference 8192x16", {"layer_size": 8192, "padding_size": 16}, SMALL, BOTH),
    ("reference 10000x8", {"layer_size": 10000, "padding_size": 8}, SMALL, BOTH),
    ("reference 8192x64", {"layer_size": 8192, "padding_size": 64}, BIG, BOTH),
]
BASELINES: list[tuple[str, dict[str, Any], list[str], tuple[str, ...]]] = [
    ("reference 1x2", {"layer_size": 1, "padding_size": 2}, SMALL, ("file", "gcs", "gcsfs")),
    (
        "llama3-debug 1 layer vocab 256",
        {"model": "llama3-debug", "layers": 1, "vocab": 256},
        SMALL,
        ("file", "gcs", "gcsfs"),
    ),
]


def run_args(settings: dict[str, Any]) -> list[str]:
    out = []
    for key, value in settings.items():
        out += ["--" + key.replace("_", "-"), str(value)]
    return out


def measure(argv: Sequence[str]) -> int:
    """The largest rank's peak RSS in bytes, from one ``ckptbench run``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, "-m", "ckptbench.cli", "run", *argv, "--json", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-3000:])
            raise SystemExit(f"ckptbench run failed ({proc.returncode}): {' '.join(argv)}")
        run = json.loads(out.read_text())["runs"][0]
    return max(int(p) for p in run["extra"]["peak_rss_bytes"] if p)


def case(
    label: str, settings: dict[str, Any], samples: list[str], backend: str, async_save: bool
) -> tuple[float, bool]:
    with tempfile.TemporaryDirectory(dir="/var/tmp") as storage:
        path = storage if backend == "file" else "gs://ckptbench/ckptbench"
        config = WorkloadConfig(
            checkpoint_path=path, backend=backend, world_size=2, async_save=async_save,
            **settings,
        )  # fmt: skip
        est = config.memory_estimate()
        where = ["--storage", storage] if backend == "file" else ["--backend", backend]
        argv = [*run_args(settings), *where, "--world-size", "2", *samples]
        if async_save:
            argv.append("--async-save")
        t0 = time.perf_counter()
        peak = measure(argv)
        seconds = time.perf_counter() - t0
    ratio = peak / est.peak_bytes
    ok = abs(ratio - 1) <= TOLERANCE
    name = f"{label}, {backend}{', async' if async_save else ''}"
    print(
        f"{name:<36} {est.peak_bytes / MIB:8.0f} {peak / MIB:9.0f} {ratio:6.2f}  "
        f"{'ok' if ok else 'OFF'}  {seconds:5.0f} s",
        flush=True,
    )
    return ratio, ok


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", default="", help="run only the cases whose name contains this")
    p.add_argument("--baseline", action="store_true", help="the calibration runs instead")
    args = p.parse_args(argv)
    states = BASELINES if args.baseline else STATES
    print(f"{'case (2 ranks)':<36} {'estimate':>8} {'measured':>9} {'ratio':>6}  (MiB, peak RSS)")
    ratios, misses = [], 0
    started = time.perf_counter()
    for label, settings, samples, backends in states:
        for backend in backends:
            for async_save in (False, True):
                name = f"{label}, {backend}{', async' if async_save else ''}"
                if args.only not in name or (args.baseline and async_save):
                    continue
                ratio, ok = case(label, settings, samples, backend, async_save)
                ratios.append(ratio)
                misses += not ok
    if ratios:
        print(
            f"{len(ratios)} cases, measured / estimate {min(ratios):.2f}..{max(ratios):.2f}, "
            f"{misses} outside +-{TOLERANCE:.0%}; {time.perf_counter() - started:.0f} s in all"
        )
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
