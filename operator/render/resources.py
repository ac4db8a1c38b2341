"""The resources of a rank's container: what the spec gives, and always a memory limit.

A rank without a memory limit can take a node's memory (a llama3-405b shard on one rank asks for
terabytes), so every rank gets one: the spec's, or, when the spec gives none, the workload's own
estimate of a rank's peak with headroom (a checkpoint rank's: ``workload/contract/checkpoint/
memory_plan.py``; a data-loading rank's: ``workload/contract/data/memory.py``). The spec model
already refused a given limit below that estimate (``resources.limits.memory``).
"""

from __future__ import annotations

import copy
from typing import Any

from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.workload.contract.checkpoint import memory_plan

# The plan is an estimate, measured within a few percent for file and gcs but least predictable
# for gcsfs (3 to 6 copies of an item measured, 5 counted): a quarter more keeps a rank that
# needs a little more than estimated from being killed.
PLAN_HEADROOM = 1.25
MIB = 1024**2


def planned_limit_bytes(spec: CheckpointBenchmarkSpec) -> int:
    """The memory limit of a rank whose spec gives none: its estimated peak with headroom, in
    whole MiB."""
    return with_headroom(spec.to_workload_config("plan", "127.0.0.1").memory_estimate().peak_bytes)


def with_headroom(peak_bytes: int) -> int:
    """A memory limit for a planned peak: the peak with headroom, in whole MiB."""
    return -(-int(peak_bytes * PLAN_HEADROOM) // MIB) * MIB


def container_resources(given: dict[str, Any] | None, planned_limit: int) -> dict[str, Any]:
    """The spec's resources (``given``) with memory requests and limits always set. Without a
    given limit the limit is ``planned_limit`` (or the given request, when larger); without a
    given request the request is the limit, so the scheduler places the rank where its memory
    is."""
    resources: dict[str, Any] = copy.deepcopy(given) if given else {}
    limits: dict[str, Any] = dict(resources.get("limits") or {})
    requests: dict[str, Any] = dict(resources.get("requests") or {})
    if "memory" not in limits:
        limit = planned_limit
        if "memory" in requests:
            limit = max(limit, memory_plan.parse_quantity(str(requests["memory"])))
        limits["memory"] = f"{-(-limit // MIB)}Mi"
    requests.setdefault("memory", limits["memory"])
    resources["limits"], resources["requests"] = limits, requests
    return resources
