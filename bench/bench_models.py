"""Model-true checkpoints: what many small items cost, and how DCP's planning grows with ranks.

    .venv/bin/python bench/bench_models.py items [--reps 3] [--backends file,gcs]
    .venv/bin/python bench/bench_models.py planning [--reps 3] [--world-sizes 2,4,8]

``items``: one rank saves and loads the same bytes as 8 tensors and as 1,500 tensors (a real
model's rank holds hundreds to thousands), through ``ckptbench run`` (real worker, real DCP; gcs
against the embedded emulator). Runs alternate few/many, repeated; prints the median save and load
throughput of each, the spread (min..max) and the ratio many/few. pytorch#194034 reports per-item
flushes costing 60% on GCS; the target is many >= 0.8 x few.

``planning``: N real processes over gloo save llama3-8b's key set (291 parameters with AdamW:
873 DTensors sharded over N ranks, 291 steps, 3,492 pickled scalars) with tiny tensors, so the
time is DCP's planning, not I/O. A planner that wraps DCP's DefaultSavePlanner times each rank's
local plan and the coordinator's global plan; the whole ``dcp.save`` is timed around them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MIB = 1024**2
TOTAL_BYTES = 192_000_000  # 8 x (6000, 1000) float32 = 1500 x (32, 1000) float32
LAYOUTS = {"few": (8, 6000), "many": (1500, 32)}


def _run_once(backend: str, padding: int, layer: int, samples: int, root: Path) -> dict[str, Any]:
    from ckptbench.workload.local import cli as run_cli

    out = root / f"{backend}-{padding}-{time.monotonic_ns()}.json"
    argv = ["--world-size", "1", "--backend", backend, "--padding-size", str(padding),
            "--layer-size", str(layer), "--samples", str(samples), "--warmup", "1",
            "--json", str(out)]  # fmt: skip
    if backend == "file":
        argv += ["--storage", str(root / "ckpt")]
    with contextlib.redirect_stdout(io.StringIO()):  # the table; the JSON holds the figures
        code = run_cli.main(argv)
    if code != 0:
        raise SystemExit(f"ckptbench run {' '.join(argv)} exited {code}")
    [run] = json.loads(out.read_text())["runs"]
    assert run["total_bytes"] == TOTAL_BYTES, run["total_bytes"]
    return {
        "save": run["save"]["throughput_bytes_per_second"] / MIB,
        "load": run["load"]["throughput_bytes_per_second"] / MIB,
    }


def bench_items(reps: int, backends: list[str], samples: int) -> None:
    print(f"per-item overhead: one rank, {TOTAL_BYTES / MIB:.1f} MiB as 8 or 1,500 float32 tensors")
    print(f"{reps} repetitions, few/many alternating; each run: 1 warm-up + {samples} samples")
    with tempfile.TemporaryDirectory(prefix="bench-models-") as tmp:
        for backend in backends:
            got: dict[str, list[dict[str, float]]] = {"few": [], "many": []}
            for rep in range(reps):
                order = ("few", "many") if rep % 2 == 0 else ("many", "few")
                for name in order:
                    padding, layer = LAYOUTS[name]
                    got[name].append(_run_once(backend, padding, layer, samples, Path(tmp)))
            for op in ("save", "load"):
                few = [r[op] for r in got["few"]]
                many = [r[op] for r in got["many"]]
                ratio = statistics.median(many) / statistics.median(few)
                print(
                    f"  {backend:5} {op}: few {statistics.median(few):7.1f} MiB/s "
                    f"({min(few):.1f}..{max(few):.1f}), many {statistics.median(many):7.1f} MiB/s "
                    f"({min(many):.1f}..{max(many):.1f}), many/few {ratio:.2f} "
                    f"({'meets' if ratio >= 0.8 else 'misses'} the 0.8 target)"
                )


# -- planning ---------------------------------------------------------------------------------


def _planning_rank(rank: int, world: int, port: int, directory: str, reps: int, out: Any) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    from ckptbench.workload.contract import models

    class TimedPlanner(DefaultSavePlanner):
        local = 0.0
        coordinator = 0.0

        def create_local_plan(self) -> Any:
            t0 = time.perf_counter()
            plan = super().create_local_plan()
            TimedPlanner.local += time.perf_counter() - t0
            return plan

        def create_global_plan(self, all_plans: Any) -> Any:
            t0 = time.perf_counter()
            result = super().create_global_plan(all_plans)
            TimedPlanner.coordinator += time.perf_counter() - t0
            return result

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    mesh = init_device_mesh("cpu", (world,))
    spec = models.ModelSpec("llama3-8b")
    state: dict[str, Any] = {}
    for t in models.state_tensors(spec):
        if t.sharded:  # llama3-8b's keys, each a (world, 4) DTensor: one tiny row per rank
            local = torch.full((1, 4), float(rank))
            shape = torch.Size((world, 4))
            state[t.key] = DTensor.from_local(
                local, mesh, [Shard(0)], run_check=False, shape=shape, stride=(4, 1)
            )
        else:
            state[t.key] = torch.tensor(1.0)
    for key in models.param_group_keys(spec):
        state[key] = 8e-4
    rows = []
    for rep in range(reps):
        TimedPlanner.local = TimedPlanner.coordinator = 0.0
        dist.barrier()
        t0 = time.perf_counter()
        dcp_save(state, checkpoint_id=f"{directory}/ckpt-{rep}", planner=TimedPlanner())
        total = time.perf_counter() - t0
        rows.append((TimedPlanner.local, TimedPlanner.coordinator, total))
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, rows)
    if rank == 0:
        out.put((len(state), gathered))
    dist.destroy_process_group()


def bench_planning(reps: int, worlds: list[int]) -> None:
    import multiprocessing as mp

    from ckptbench.workload.contract import models
    from ckptbench.workload.local.emulator import free_port

    sizes = models.model_sizes(models.ModelSpec("llama3-8b"), 1)
    print(
        f"planning: llama3-8b keys ({sizes.tensors} tensors + {sizes.byte_items} pickled items "
        f"a rank), tiny tensors, file backend; {reps} saves each, medians (min..max) over saves, "
        "slowest rank's local plan"
    )
    ctx = mp.get_context("spawn")
    for world in worlds:
        with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
            queue = ctx.Queue()
            port = free_port()
            procs = [
                ctx.Process(target=_planning_rank, args=(r, world, port, tmp, reps, queue))
                for r in range(world)
            ]
            for p in procs:
                p.start()
            keys, gathered = queue.get(timeout=1800)
            for p in procs:
                p.join()
            local = [max(g[rep][0] for g in gathered) for rep in range(reps)]
            coord = [gathered[0][rep][1] for rep in range(reps)]
            total = [max(g[rep][2] for g in gathered) for rep in range(reps)]
            items = models.model_sizes(models.ModelSpec("llama3-8b"), world).stored_items

            def show(xs: list[float]) -> str:
                return f"{statistics.median(xs):6.2f} s ({min(xs):.2f}..{max(xs):.2f})"

            print(
                f"  N={world}: {keys} keys a rank, {items:,} items stored; "
                f"local plan {show(local)}, global plan {show(coord)}, whole save {show(total)}"
            )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench_models.py")
    sub = p.add_subparsers(dest="what", required=True)
    items = sub.add_parser("items")
    items.add_argument("--reps", type=int, default=3)
    items.add_argument("--backends", default="file,gcs")
    items.add_argument("--samples", type=int, default=3)
    planning = sub.add_parser("planning")
    planning.add_argument("--reps", type=int, default=3)
    planning.add_argument("--world-sizes", default="2,4,8")
    args = p.parse_args(argv)
    if args.what == "items":
        bench_items(args.reps, args.backends.split(","), args.samples)
    else:
        bench_planning(args.reps, [int(w) for w in args.world_sizes.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
