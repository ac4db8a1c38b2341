"""Operator figures: status aggregation time and size by world size, render time, and reconcile
latency (CheckpointBenchmark created -> JobSet exists) of the real operator against kmock.

Targets: aggregation < 1 s at every size (100,000 ranks included), status < 256 KiB. Each rank's
message is what a worker writes (harness/rank_pods.py: save, load and delete with their samples,
resources; ~3.6 KiB), and the pods are decoded afresh for each reconcile, in name order, as the
operator's list call gives them. The operator keeps, per benchmark, what its last reconcile read
(operator/status/memo.py), so three reconciles are timed, interleaved in each repeat:

- ``one new``: one rank's result arrived since the last reconcile, which saw its pod running:
  what a running benchmark's reconciles do. The target is set on this one.
- ``unchanged``: nothing new since the last reconcile (a resync, a pod event that changed no
  result).
- ``cold``: nothing kept (the operator has just started): every message is read.

Each row gives the median, best and worst wall time of the repeats, the CPU median and per
rank, what the memo keeps per rank (tracemalloc), and the status's size. The 100,000-rank row
holds over a gigabyte (the pods as JSON text and decoded, and the memo) and takes minutes.

    .venv/bin/python bench/bench_operator.py [--ranks 1000 10000 100000] [--repeats 5]
        [--creations 5] [--status-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ckptbench.operator.render import jobset as rendering
from ckptbench.operator.render import labels as render_labels
from ckptbench.operator.spec import names as spec_names
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.status_schema import status_body
from ckptbench.operator.status.compute import compute_status
from ckptbench.operator.status.memo import StatusMemo
from ckptbench.operator.status.pods import COMPLETION_INDEX
from ckptbench.workload.contract.checkpoint import sizes
from harness import rank_pods
from harness.kmock_cluster import Client, running_emulator, write_kubeconfig
from harness.operator_process import Operator, wait_for

AGGREGATION_TARGET_SECONDS = 1.0
STATUS_TARGET_BYTES = 256 * 1024


def pods_text(world: int, samples: int) -> str:
    """The rank pods' list as the API server sends it: JSON, in name order, each pod carrying the
    termination message its worker writes (every field a successful rank reports, values of its
    own). Decoded afresh for each reconcile, as the operator's list call does."""
    shard = sizes.shard_bytes(0, world, 100_000, world)
    pods = [
        rank_pods.rank_pod(
            "bench", rank, rank_pods.rank_result(rank, shard, samples).to_termination_message()
        )
        for rank in range(world)
    ]
    return json.dumps(rank_pods.listed(pods))


@dataclass(frozen=True)
class WorldSpec:
    """What compute_status reads of a spec (its RunSpec), for any world size: the spec model caps
    worldSize below the largest size measured here."""

    world_size: int
    total_bytes: int
    max_restarts: int = 0
    queue_name: str | None = None
    load_world_size: int | None = None

    @property
    def rank_count(self) -> int:
        return max(self.world_size, self.load_world_size or 0)


def _running(pods: list[dict[str, Any]], rank: int) -> list[dict[str, Any]]:
    """The pods as a reconcile saw them while ``rank``'s worker still ran."""
    pod = next(p for p in pods if p["metadata"]["annotations"].get(COMPLETION_INDEX) == str(rank))
    pod["status"] = {"phase": "Running", "startTime": pod["status"]["startTime"]}
    return pods


def _kept_per_rank(text: str, the_spec: WorldSpec, ranks: int) -> float:
    """Bytes the memo holds per rank after one reconcile (tracemalloc: Python allocations)."""
    jobset = {"metadata": {"name": "bench"}, "spec": {}, "status": {}}
    pods = json.loads(text)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    memo = StatusMemo()
    compute_status(the_spec, jobset, pods, None, datetime.now(UTC), memo=memo)
    del pods  # the reconcile's own list goes; the memo stays
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del memo
    return kept / ranks


def bench_status(ranks: int, repeats: int) -> None:
    the_spec = WorldSpec(world_size=ranks, total_bytes=sizes.total_bytes(100_000, ranks))
    text = pods_text(ranks, 8)
    jobset = {"metadata": {"name": "bench"}, "spec": {}, "status": {}}
    now = datetime.now(UTC)
    wall: dict[str, list[float]] = {"one new": [], "unchanged": [], "cold": []}
    cpu: dict[str, list[float]] = {k: [] for k in wall}
    body: dict[str, Any] = {}
    bodies = set()

    def timed(kind: str, memo: StatusMemo, pods: list[dict[str, Any]]) -> None:
        nonlocal body
        t0, c0 = time.perf_counter(), time.process_time()
        status = compute_status(the_spec, jobset, pods, None, now, memo=memo)
        wall[kind].append(time.perf_counter() - t0)
        cpu[kind].append(time.process_time() - c0)
        body = status_body(status)
        bodies.add(json.dumps(body, sort_keys=True))

    for repeat in range(repeats):
        memo = StatusMemo()
        timed("cold", memo, json.loads(text))
        # A different rank's result arrives at each repeat; its part is the one reduced again.
        compute_status(
            the_spec, jobset, _running(json.loads(text), repeat * 997 % ranks), None, now, memo=memo
        )
        timed("one new", memo, json.loads(text))
        timed("unchanged", memo, json.loads(text))
    size = len(json.dumps(body).encode())
    kept = _kept_per_rank(text, the_spec, ranks)
    target = statistics.median(wall["one new"])
    # CPU seconds beside wall seconds: on a shared machine the wall clock counts other programs.
    print(
        f"status aggregation, {ranks:>7,} ranks, {repeats} repeats: "
        f"{'OK' if target < AGGREGATION_TARGET_SECONDS else 'MISSED'} (one new result); "
        f"status {size / 1024:.1f} KiB {'OK' if size < STATUS_TARGET_BYTES else 'MISSED'}, "
        f"the same in every reconcile: {len(bodies) == 1}; "
        f"phase {body['phase']}, ranks {body['ranksSummary']}; "
        f"the memo keeps {kept / 1024:.1f} KiB a rank"
    )
    for kind in wall:
        w, c = wall[kind], cpu[kind]
        print(
            f"    {kind:>9}: median {statistics.median(w) * 1000:8.1f} ms "
            f"(best {min(w) * 1000:.1f}, worst {max(w) * 1000:.1f}), CPU median "
            f"{statistics.median(c) * 1000:.1f} ms, {statistics.median(c) / ranks * 1e6:.1f} µs "
            "a rank"
        )


def bench_render(repeats: int) -> None:
    the_spec = CheckpointBenchmarkSpec(world_size=64, checkpoint_path="gs://bucket/bench")
    defaults = rendering.RenderDefaults(image="registry.example/ckptbench:1")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        rendering.render_jobset("bench", "default", "0000-uid", the_spec, defaults)
        times.append(time.perf_counter() - t0)
    print(f"render_jobset: median {statistics.median(times) * 1e6:.0f} µs over {repeats} renders")


def bench_reconcile(creations: int) -> None:
    with running_emulator() as emulator, tempfile.TemporaryDirectory() as tmp:
        operator = Operator(
            write_kubeconfig(Path(tmp) / "kubeconfig", emulator.url), Path(tmp) / "operator.log"
        )
        client = Client(emulator.url)
        operator.start()
        try:
            latencies = []
            for i in range(creations):
                name = f"latency-{i}"
                body = {
                    "apiVersion": spec_names.API_VERSION,
                    "kind": spec_names.KIND,
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {
                        "worldSize": 4,
                        "layerSize": 10,
                        "checkpointPath": "gs://bucket/bench",
                    },
                }
                t0 = time.perf_counter()
                client.create(spec_names.API_VERSION, spec_names.PLURAL, body)
                wait_for(
                    "the JobSet",
                    lambda n=name: client.get(  # type: ignore[misc]
                        render_labels.JOBSET_API_VERSION, "jobsets", "default", n
                    ),
                    deadline=30,
                )
                latencies.append(time.perf_counter() - t0)
        finally:
            operator.stop()
    print(
        f"reconcile latency create -> JobSet exists (kmock, {creations} creations): median "
        f"{statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--creations", type=int, default=5)
    parser.add_argument("--status-only", action="store_true", help="skip render and reconcile")
    args = parser.parse_args()
    for ranks in args.ranks:
        bench_status(ranks, args.repeats)
    if args.status_only:
        return 0
    bench_render(200)
    bench_reconcile(args.creations)
    return 0


if __name__ == "__main__":
    sys.exit(main())
