"""The resources of a rank's container: what the spec gives, and always a memory limit.

A rank without a memory limit can take a node's memory (a llama3-405b shard on one rank asks for
terabytes), so every rank gets one: the spec's, or, when the spec gives none, the workload's own
estimate of a rank's peak (``workload/contract/checkpoint/memory_plan.py``) with headroom. The spec
model already refused a given limit below that estimate (``resources.limits.memory``).
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
    peak = spec.to_workload_config("plan", "127.0.0.1").memory_estimate().peak_bytes
    return -(-int(peak * PLAN_HEADROOM) // MIB) * MIB


def container_resources(spec: CheckpointBenchmarkSpec) -> dict[str, Any]:
    """The spec's resources with memory requests and limits always set. Without a given limit
    the limit is the plan's (or the given request, when larger); without a given request the
    request is the limit, so the scheduler places the rank where its memory is."""
    resources: dict[str, Any] = copy.deepcopy(spec.resources) if spec.resources else {}
    limits: dict[str, Any] = dict(resources.get("limits") or {})
    requests: dict[str, Any] = dict(resources.get("requests") or {})
    if "memory" not in limits:
        limit = planned_limit_bytes(spec)
        if "memory" in requests:
            limit = max(limit, memory_plan.parse_quantity(str(requests["memory"])))
        limits["memory"] = f"{-(-limit // MIB)}Mi"
    requests.setdefault("memory", limits["memory"])
    resources["limits"], resources["requests"] = limits, requests
    return resources
