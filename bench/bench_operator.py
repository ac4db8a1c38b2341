"""Operator figures: status aggregation time and size by world size, render time, and reconcile
latency (CheckpointBenchmark created -> JobSet exists) of the real operator against kmock.

Targets: aggregation < 1 s at every size (100,000 ranks included), status < 256 KiB. One row per
world size: median, best and worst of the repeats, and the cost per rank, which stays flat when
the aggregation is linear. The 100,000-rank row holds ~2 GB of pods and takes minutes.

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
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
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
    pods = pods_for(ranks, 8)
    jobset = {"metadata": {"name": "bench"}, "spec": {}, "status": {}}
    now = datetime.now(UTC)
    times, cpu = [], []
    body: dict[str, Any] = {}
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        body = status_body(compute_status(the_spec, jobset, pods, None, now))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    size = len(json.dumps(body).encode())
    median = statistics.median(times)
    # CPU seconds beside wall seconds: on a shared machine the wall clock counts other programs.
    print(
        f"status aggregation, {ranks:>7,} ranks: median {median * 1000:8.1f} ms "
        f"(best {min(times) * 1000:.1f}, worst {max(times) * 1000:.1f}, {repeats} runs), "
        f"CPU median {statistics.median(cpu) * 1000:.1f} ms "
        f"(best {min(cpu) * 1000:.1f}, worst {max(cpu) * 1000:.1f}), "
        f"{statistics.median(cpu) / ranks * 1e6:.1f} µs CPU a rank "
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
