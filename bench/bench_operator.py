"""Operator figures: status aggregation time and size by world size, render time, and reconcile
latency (CheckpointBenchmark created -> JobSet exists) of the real operator against kmock.

Targets: aggregation < 1 s at every size (100,000 ranks included), status < 256 KiB. One row per
world size: median, best and worst of the repeats, and the cost per rank, which stays flat when
the aggregation is linear; beside it, the part of it spent reading the termination messages
(JSON parsed and every number bounded, rank.py). Each rank's message is what a worker writes
(harness/rank_pods.py: save, load and delete with their samples, resources; ~3.6 KiB), and the
pods are decoded afresh for each repeat, in name order, as the operator's list call gives them.
The 100,000-rank row holds ~3 GB of pods and takes minutes.

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
from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.results.rank import RankResult
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


def bench_status(ranks: int, repeats: int) -> None:
    the_spec = WorldSpec(world_size=ranks, total_bytes=sizes.total_bytes(100_000, ranks))
    text = pods_text(ranks, 8)
    jobset = {"metadata": {"name": "bench"}, "spec": {}, "status": {}}
    now = datetime.now(UTC)
    times, cpu = [], []
    body: dict[str, Any] = {}
    for _ in range(repeats):
        pods = json.loads(text)
        t0, c0 = time.perf_counter(), time.process_time()
        body = status_body(compute_status(the_spec, jobset, pods, None, now))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    size = len(json.dumps(body).encode())
    messages = [
        p["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
        for p in json.loads(text)
    ]
    reading = []
    for _ in range(repeats):
        c0 = time.process_time()
        for message in messages:
            RankResult.from_termination_message(message)
        reading.append(time.process_time() - c0)
    median = statistics.median(times)
    # CPU seconds beside wall seconds: on a shared machine the wall clock counts other programs.
    print(
        f"status aggregation, {ranks:>7,} ranks: median {median * 1000:8.1f} ms "
        f"(best {min(times) * 1000:.1f}, worst {max(times) * 1000:.1f}, {repeats} runs), "
        f"CPU median {statistics.median(cpu) * 1000:.1f} ms "
        f"(best {min(cpu) * 1000:.1f}, worst {max(cpu) * 1000:.1f}), "
        f"{statistics.median(cpu) / ranks * 1e6:.1f} µs CPU a rank, of which reading the "
        f"messages {statistics.median(reading) / ranks * 1e6:.1f} µs "
        f"({statistics.median(reading) / statistics.median(cpu):.0%}) "
        f"{'OK' if median < AGGREGATION_TARGET_SECONDS else 'MISSED'}; "
        f"status {size / 1024:.1f} KiB {'OK' if size < STATUS_TARGET_BYTES else 'MISSED'}, "
        f"phase {body['phase']}, ranks {body['ranksSummary']}"
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
