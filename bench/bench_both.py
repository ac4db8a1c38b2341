"""Both demands at once: each side's slowdown against running alone, over repeated runs.

Each run is the real command line, ``ckptbench run --data-loading --json`` in a subprocess: 2
ranks, a reference-layout checkpoint of ``--padding-size`` (1000, 1000) float32 tensors saved with
``--save-mode``, ``--samples`` cycles of three windows (save alone, together, loader alone) of
``--train-every`` steps, each step a batch of the loader's laptop shape of ``--preset`` with
``--compute`` seconds of emulated compute; on a folder (``--storage``, default a temporary one) or
the embedded GCS emulator (``--emulator``). Prints, per figure, the median over ``--repeats`` runs
and the spread [min-max], and each run's slowdowns with their 95% intervals
(docs/measurement.md, "Both demands at once").

Run: ``nice -n 10 .venv/bin/python bench/bench_both.py`` (three runs of a few seconds each on a
folder; ``--emulator`` for the GCS emulator; ``--save-mode sync`` to compare).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

FIGURES = (
    "samples_per_second_alone",
    "samples_per_second_together",
    "au_alone",
    "au_together",
    "save_seconds_alone",
    "save_seconds_together",
    "stall_seconds_alone",
    "stall_seconds_together",
)
SLOWDOWNS = ("loader_slowdown", "save_slowdown", "stall_slowdown")


def one_run(args: argparse.Namespace, out: Path, storage: str | None) -> dict[str, Any]:
    where = ["--storage", storage, "--backend", "file"] if storage else []
    command = [
        sys.executable, "-c", "from ckptbench.cli import main; main()", "run", *where,
        "--world-size", "2", "--layer-size", "1000", "--padding-size", str(args.padding_size),
        "--samples", str(args.samples), "--train-every", str(args.train_every),
        "--save-mode", args.save_mode, "--data-preset", args.preset,
        "--data-compute", str(args.compute), "--quiet", "--json", str(out),
    ]  # fmt: skip
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    document = json.loads(out.read_text())
    found = _find_both(document)
    if found is None:
        raise SystemExit(f"no both figures in {out}")
    return found


def _find_both(node: Any) -> dict[str, Any] | None:
    """The summary's ``both`` wherever the JSON document holds it."""
    if isinstance(node, dict):
        if isinstance(node.get("both"), dict):
            return dict(node["both"])
        children = list(node.values())
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _find_both(child)
        if found is not None:
            return found
    return None


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):10.4f}  [{min(values):.4f}-{max(values):.4f}]"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--samples", type=int, default=4, help="cycles of three windows")
    p.add_argument("--train-every", type=int, default=4)
    p.add_argument("--padding-size", type=int, default=8)
    p.add_argument("--save-mode", default="thread")
    p.add_argument("--preset", default="mlperf-resnet50")
    p.add_argument("--compute", type=float, default=0.01)
    p.add_argument("--emulator", action="store_true", help="the embedded GCS emulator")
    args = p.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-both-") as tmp:
        for i in range(args.repeats):
            storage = None if args.emulator else str(Path(tmp) / "store")
            if storage:
                Path(storage).mkdir(exist_ok=True)
            runs.append(one_run(args, Path(tmp) / f"run-{i}.json", storage))
    print(f"{args.repeats} runs, save mode {args.save_mode}, {args.samples} cycles of "
          f"{args.train_every} steps; median [min-max] over runs")  # fmt: skip
    for name in FIGURES:
        print(f"{name:32s} {_spread([r[name] for r in runs])}")
    for name in SLOWDOWNS:
        print(f"{name:32s} {_spread([r[name]['ratio'] for r in runs])}")
        for r in runs:
            ci = r[name]["interval"]
            shown = "n/a" if ci is None else f"[{ci['low']:.2f}, {ci['high']:.2f}]"
            print(f"{'':32s}   run: {r[name]['ratio']:.2f}x {shown} (rank {r[name]['rank']})")


if __name__ == "__main__":
    main()
