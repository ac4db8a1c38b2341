"""Rank pods as the operator lists them, each carrying a termination message as a worker writes it.

For the status bench and the status tests: each rank's :class:`RankResult` has what
``workload/rank/loop.py`` reports (save, load and delete with their per-sample lists and wall-clock
times, rank 0's ``finish`` on save and delete, read and needed bytes on load, resources with the
peak RSS, setup time, read paths, rank 0's checkpoint facts), with values drawn per rank so no two
ranks tie, and the pods come in name order, as the API server lists them (``...-10`` before
``...-2``).
"""

from __future__ import annotations

import random
from typing import Any

from ckptbench.operator.render import labels as render_labels
from ckptbench.workload.contract.choices import CacheMode, Procedure
from ckptbench.workload.contract.results.rank import OpTiming, RankResources, RankResult

EPOCH = 1_764_090_000.0  # the first sample's start, Unix seconds
GIB = 1 << 30


def _op(
    rng: random.Random,
    rank: int,
    base: float,
    samples: int,
    offset: float,
    *,
    finish: bool = True,
    **extra: Any,
) -> OpTiming:
    seconds = [base * (1 + rng.random() / 5) for _ in range(samples)]
    io = [s * (0.80 + rng.random() / 10) for s in seconds]
    started = [EPOCH + offset + i * 10 + rng.random() / 100 for i in range(samples)]
    return OpTiming.of(
        seconds,
        io,
        [s * (0.02 + rng.random() / 50) for s in seconds],
        # Rank 0's .metadata write (save) and its sweep of what is left (delete); no collection
        # inside the operations: garbage collection is manual by default.
        finish_seconds=[s / 50 for s in seconds] if rank == 0 and finish else None,
        started_at=started,
        ended_at=[t + s for t, s in zip(started, seconds, strict=True)],
        **extra,
    )


def rank_result(
    rank: int,
    shard_bytes: int,
    samples: int = 8,
    *,
    seed: int = 0,
    procedure: Procedure = Procedure.CKPTBENCH,
    cache: CacheMode | None = None,
) -> RankResult:
    """What rank ``rank`` of a successful run reports, its values its own (``seed`` varies runs)."""
    rng = random.Random(seed * 1_000_003 + rank)
    read = int(shard_bytes * samples * (1 + rng.random() / 20))
    return RankResult(
        rank=rank,
        host=f"node-{rank // 8}",
        bytes=shard_bytes,
        load_bytes=shard_bytes,
        save=_op(rng, rank, 1.3 + rng.random(), samples, 0.0),
        load=_op(
            rng,
            rank,
            0.8 + rng.random(),
            samples,
            3.0,
            finish=False,
            read_bytes=read,
            needed_bytes=shard_bytes * samples,
        ),
        delete=_op(rng, rank, 0.05 + rng.random() / 20, samples, 6.0),
        verified=True,
        resources=RankResources(
            cpu_user_seconds=round(20 + rng.random() * 10, 6),
            cpu_system_seconds=round(3 + rng.random() * 3, 6),
            peak_rss_bytes=int(GIB * (0.5 + rng.random())),
            sent_bytes=shard_bytes * samples + rng.randrange(1 << 20),
            received_bytes=read + rng.randrange(1 << 20),
            node_memory_bytes=64 * GIB,
        ),
        setup_seconds=round(rng.random() / 10, 6),
        read_paths={"direct": 196 + rank % 5},
        procedure=procedure,
        cache=cache,
        checkpoint=(
            {"payload_bytes": shard_bytes, "stored_bytes": shard_bytes + 4096, "objects": 2}
            if rank == 0
            else None
        ),
    )


def rank_pod(benchmark: str, rank: int, message: str) -> dict[str, Any]:
    """A succeeded rank pod of ``benchmark``'s JobSet carrying ``message``."""
    return {
        "metadata": {
            "name": f"{benchmark}-rank-0-{rank}-{rank * 7919 % 100_000:05d}",
            "resourceVersion": str(1000 + rank),
            "labels": {
                **render_labels.benchmark_labels(benchmark),
                "jobset.sigs.k8s.io/restart-attempt": "0",
            },
            "annotations": {render_labels.COMPLETION_INDEX_ANNOTATION: str(rank)},
        },
        "status": {
            "phase": "Succeeded",
            "startTime": "2025-11-25T18:00:00Z",
            "containerStatuses": [
                {
                    "name": "worker",
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "finishedAt": f"2025-11-25T18:{10 + rank % 40}:00Z",
                            "message": message,
                        }
                    },
                }
            ],
        },
    }


def listed(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods in the API server's list order: by name, as strings."""
    return sorted(pods, key=lambda p: str(p["metadata"]["name"]))
