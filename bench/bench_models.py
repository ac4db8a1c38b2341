"""Model-true checkpoints: what many small items cost, and how DCP's planning grows with ranks.

    .venv/bin/python bench/bench_models.py items [--reps 3] [--backends file,gcs]
                                                 [--sizes representative,small]
                                                 [--gc manual,automatic]
    .venv/bin/python bench/bench_models.py planning [--reps 3] [--world-sizes 2,4,8]

``items``: one rank saves and loads the same bytes as 8 tensors and as 1,500 tensors, through
``ckptbench run`` (real worker, real DCP with its default writer, reader and planners; gcs
against the embedded emulator), at two totals:

- ``representative``: 1.2 GB (1,500 tensors of 800 KB), a rank's share of a real job: llama3-8b
  on 8 ranks holds 11.2 GiB in 4,661 items, about 2.5 MB an item. The 0.8 target is judged here.
- ``small``: 192 MB (1,500 tensors of 128 KB), where fixed per-item costs dominate.

Runs alternate few/many and the garbage collection modes (``--gc``: the ranks' ``manual``
collection, automatic collection off as torchtitan trains, against Python's ``automatic``),
repeated; for each backend, size and mode it prints the median save and load
throughput of each (min..max over repetitions), the ratio many/few and the per-item cost in
microseconds, (median many seconds - median few seconds) / 1,492 extra items, split into
planning, garbage collection and I/O, so the result carries to other item sizes. Last, what DCP's
file format costs per item on this machine: one ``torch.save`` (what FileSystemWriter does per
item) and one ``torch.load(weights_only=True)`` (FileSystemReader) of a 128 KB tensor in memory,
no I/O.

``planning``: N real processes over gloo save llama3-8b's key set (291 parameters with AdamW:
873 DTensors sharded over N ranks, 291 steps, 3,492 pickled scalars, torchtitan's 5 small items)
with tiny tensors, so the
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
# name -> (total bytes, {layout: (tensors, rows of 1,000 float32)})
SIZES = {
    "representative": (1_200_000_000, {"few": (8, 37_500), "many": (1500, 200)}),
    "small": (192_000_000, {"few": (8, 6000), "many": (1500, 32)}),
}
EXTRA_ITEMS = 1500 - 8


def _run_once(
    backend: str, padding: int, layer: int, samples: int, root: Path, total: int, gc: str
) -> dict[str, Any]:
    from ckptbench.workload.local import cli as run_cli

    out = root / f"{backend}-{padding}-{time.monotonic_ns()}.json"
    argv = ["--world-size", "1", "--backend", backend, "--padding-size", str(padding),
            "--layer-size", str(layer), "--samples", str(samples), "--warmup", "1",
            "--gc", gc, "--json", str(out)]  # fmt: skip
    if backend == "file":
        argv += ["--storage", str(root / "ckpt")]
    said = io.StringIO()  # the table and the ranks' progress: the JSON holds the figures
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        code = run_cli.main(argv)
    if code != 0:
        raise SystemExit(f"ckptbench run {' '.join(argv)} exited {code}:\n{said.getvalue()}")
    [run] = json.loads(out.read_text())["runs"]
    assert run["total_bytes"] == total, run["total_bytes"]
    return {
        op: {
            "rate": run[op]["throughput_bytes_per_second"] / MIB,
            "seconds": run[op]["mean_seconds"],
            "planning": run[op]["planning_mean_seconds"],
            "gc": run[op].get("gc_mean_seconds") or 0.0,
        }
        for op in ("save", "load")
    }


def _spread(xs: list[float], fmt: str = "7.1f") -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):.1f}..{max(xs):.1f})"


def _per_item(few: list[dict[str, float]], many: list[dict[str, float]], key: str) -> float:
    """Microseconds each extra item adds: the difference of the medians over the extra items."""
    extra = statistics.median(x[key] for x in many) - statistics.median(x[key] for x in few)
    return float(extra) / EXTRA_ITEMS * 1e6


def bench_items(
    reps: int, backends: list[str], samples: int, sizes: list[str], gcs: list[str]
) -> None:
    threads = os.environ.get("OMP_NUM_THREADS") or f"{os.cpu_count()} (one rank: all cores)"
    print("per-item overhead: one rank, float32 tensors of 1,000 columns, 8 against 1,500")
    print(
        f"{reps} repetitions, few/many alternating; each run: 1 warm-up + {samples} samples; "
        "DCP defaults: FileSystemWriter(thread_count=1, sync_files=True, single_file_per_rank="
        f"True), DefaultSavePlanner, DefaultLoadPlanner; rank intra-op threads {threads}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-models-") as tmp:
        for backend in backends:
            for size in sizes:
                total, layouts = SIZES[size]
                got: dict[tuple[str, str], list[dict[str, Any]]] = {
                    (gc, name): [] for gc in gcs for name in ("few", "many")
                }
                for rep in range(reps):
                    order = ("few", "many") if rep % 2 == 0 else ("many", "few")
                    for gc in gcs if rep % 2 == 0 else gcs[::-1]:
                        for name in order:
                            padding, layer = layouts[name]
                            got[gc, name].append(
                                _run_once(backend, padding, layer, samples, Path(tmp), total, gc)
                            )
                item_kb = total / 1500 / 1000
                print(f"  {backend} {size}: {total / 1e6:,.0f} MB, {item_kb:,.0f} KB an item")
                for gc, op in ((gc, op) for gc in gcs for op in ("save", "load")):
                    few = [r[op] for r in got[gc, "few"]]
                    many = [r[op] for r in got[gc, "many"]]
                    rate_few, rate_many = [x["rate"] for x in few], [x["rate"] for x in many]
                    ratio = statistics.median(rate_many) / statistics.median(rate_few)

                    verdict = "meets" if ratio >= 0.8 else "misses"
                    judged = " the 0.8 target" if size == "representative" else " 0.8"
                    print(
                        f"    gc {gc} {op}: few {_spread(rate_few)} MiB/s, many "
                        f"{_spread(rate_many)} MiB/s, many/few {ratio:.2f} ({verdict}{judged}); "
                        f"per extra item {_per_item(few, many, 'seconds'):.0f} us, of which "
                        f"planning {_per_item(few, many, 'planning'):.0f} us, garbage "
                        f"collection {_per_item(few, many, 'gc'):.0f} us"
                    )
    _format_costs()


def _format_costs(reps: int = 300) -> None:
    """What DCP's file format costs per item, in memory: one torch.save, one torch.load."""
    import torch

    tensor = torch.ones(32, 1000)
    buf = io.BytesIO()
    times: dict[str, list[float]] = {"save": [], "load": []}
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            buf.seek(0)
            torch.save(tensor, buf)
        times["save"].append((time.perf_counter() - t0) / reps * 1e6)
        blob = buf.getvalue()
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.load(io.BytesIO(blob), weights_only=True)
        times["load"].append((time.perf_counter() - t0) / reps * 1e6)
    print(
        f"  DCP's per-item format cost, 128 KB tensor in memory ({reps} x 3, median (min..max)): "
        f"torch.save {_spread(times['save'], '.0f')} us, "
        f"torch.load(weights_only=True) {_spread(times['load'], '.0f')} us"
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

    from ckptbench.workload.contract.checkpoint import models
    from ckptbench.workload.rank import model_state

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
    state.update(model_state.small_items(spec, 0, world, rank))  # torchtitan's, one own a rank
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

    from ckptbench.workload.contract.checkpoint import models
    from ckptbench.workload.local.emulator import free_port

    sizes = models.model_sizes(models.ModelSpec("llama3-8b"), 1)
    print(
        f"planning: llama3-8b keys ({sizes.tensors} tensors + "
        f"{sizes.byte_items + sizes.rank_byte_items} pickled items "
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
    items.add_argument("--sizes", default="representative,small")
    items.add_argument("--gc", default="manual,automatic", help="garbage collection modes")
    planning = sub.add_parser("planning")
    planning.add_argument("--reps", type=int, default=3)
    planning.add_argument("--world-sizes", default="2,4,8")
    args = p.parse_args(argv)
    if args.what == "items":
        sizes = args.sizes.split(",")
        unknown = [x for x in sizes if x not in SIZES]
        if unknown:
            p.error(f"--sizes: unknown {unknown}; known: {', '.join(SIZES)}")
        modes = args.gc.split(",")
        if any(m not in ("manual", "automatic") for m in modes):
            p.error(f"--gc: {args.gc!r}: each mode must be manual or automatic")
        bench_items(args.reps, args.backends.split(","), args.samples, sizes, args.gc.split(","))
    else:
        bench_planning(args.reps, [int(w) for w in args.world_sizes.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
