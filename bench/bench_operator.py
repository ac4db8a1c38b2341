"""Operator figures: status aggregation time and size at 1000 ranks, render time, and reconcile
latency (CheckpointBenchmark created -> JobSet exists) of the real operator against kmock.

Targets: aggregation of 1000 ranks < 1 s, status < 256 KiB.

    .venv/bin/python bench/bench_operator.py [--ranks 1000] [--creations 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ckptbench.operator.render import jobset as rendering
from ckptbench.operator.render import labels as render_labels
from ckptbench.operator.spec import names as spec_names
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.status.compute import compute_status
from ckptbench.workload.contract import sizes
from ckptbench.workload.contract.results import OpTiming, RankResult
from harness.kmock_cluster import Client, running_emulator, write_kubeconfig
from harness.operator_process import Operator, wait_for

AGGREGATION_TARGET_SECONDS = 1.0
STATUS_TARGET_BYTES = 256 * 1024


def pods_for(world: int, samples: int) -> list[dict[str, Any]]:
    pods = []
    for rank in range(world):
        seconds = [1.0 + (rank % 7) / 100 + s / 1000 for s in range(samples)]
        result = RankResult(
            rank=rank,
            host=f"node-{rank // 8}",
            bytes=sizes.shard_bytes(rank, world, 100_000, world),
            save=OpTiming.of(seconds, [s * 0.9 for s in seconds]),
            load=OpTiming.of([s / 2 for s in seconds], [s / 2.2 for s in seconds]),
            verified=True,
        )
        pods.append(
            {
                "metadata": {
                    "name": f"bench-rank-0-{rank}-abcde",
                    "labels": render_labels.benchmark_labels("bench"),
                    "annotations": {render_labels.COMPLETION_INDEX_ANNOTATION: str(rank)},
                },
                "status": {
                    "phase": "Succeeded",
                    "startTime": "2025-01-01T00:00:00Z",
                    "containerStatuses": [
                        {
                            "name": "worker",
                            "state": {
                                "terminated": {
                                    "exitCode": 0,
                                    "finishedAt": "2025-01-01T00:10:00Z",
                                    "message": result.to_termination_message(),
                                }
                            },
                        }
                    ],
                },
            }
        )
    return pods


def bench_status(ranks: int, repeats: int) -> None:
    the_spec = CheckpointBenchmarkSpec(
        world_size=ranks,
        layer_size=100_000,
        padding_size=ranks,
        checkpoint_path="gs://bucket/bench",
    )
    pods = pods_for(ranks, 8)
    jobset = {"metadata": {"name": "bench"}, "spec": {}, "status": {}}
    now = datetime.now(UTC)
    times = []
    status: dict[str, Any] = {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        status = compute_status(the_spec, jobset, pods, None, now)
        times.append(time.perf_counter() - t0)
    size = len(json.dumps(status).encode())
    best, median = min(times), statistics.median(times)
    print(
        f"status aggregation, {ranks} ranks: median {median * 1000:.1f} ms, best "
        f"{best * 1000:.1f} ms (target < {AGGREGATION_TARGET_SECONDS:.0f} s) "
        f"{'OK' if median < AGGREGATION_TARGET_SECONDS else 'MISSED'}"
    )
    print(
        f"status size, {ranks} ranks: {size} bytes = {size / 1024:.1f} KiB "
        f"(target < 256 KiB) {'OK' if size < STATUS_TARGET_BYTES else 'MISSED'}; "
        f"phase {status['phase']}, ranks {status['ranksSummary']}"
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
    parser.add_argument("--ranks", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--creations", type=int, default=5)
    args = parser.parse_args()
    bench_status(args.ranks, args.repeats)
    bench_render(200)
    bench_reconcile(args.creations)
    return 0


if __name__ == "__main__":
    sys.exit(main())
