"""Every rendered rank has memory requests and limits: the spec's, or the memory plan's."""

from __future__ import annotations

from typing import Any

import pytest

from ckptbench.operator.render.jobset import RenderDefaults, render_jobset
from ckptbench.operator.render.resources import PLAN_HEADROOM
from ckptbench.operator.spec.parse import SpecError, parse_spec
from ckptbench.workload.contract.checkpoint.memory_plan import parse_quantity

DEFAULTS = RenderDefaults(image="img:1")
GIB = 1024**3


def container(raw: dict[str, Any]) -> dict[str, Any]:
    jobset = render_jobset("b", "ns", "uid", parse_spec(raw), DEFAULTS)
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    found: dict[str, Any] = pod["containers"][0]
    return found


@pytest.mark.parametrize(
    "raw",
    [
        # The two specs the operator admitted without limits.
        {"worldSize": 1, "model": "llama3-405b", "checkpointPath": "gs://bucket/x"},
        # A shipped Hugging Face config, sized from its config.json with no torch in the operator.
        {"worldSize": 8, "model": "mixtral-8x7b", "checkpointPath": "gs://bucket/x"},
        {
            "worldSize": 1,
            "layerSize": 10_000_000,
            "paddingSize": 1000,
            "checkpointPath": "gs://bucket/x",
        },
        {"worldSize": 2, "layerSize": 1000, "paddingSize": 4, "checkpointPath": "gs://bucket/x"},
        # Resources without memory: the CPU stays, memory is added.
        {"worldSize": 2, "checkpointPath": "gs://bucket/x", "resources": {"limits": {"cpu": "2"}}},
    ],
)
def test_a_rank_without_a_memory_limit_gets_the_plans(raw: dict[str, Any]) -> None:
    spec = parse_spec(raw)
    peak = spec.to_workload_config("r", "h").memory_estimate().peak_bytes
    resources = container(raw)["resources"]
    limit = parse_quantity(resources["limits"]["memory"])
    assert peak * PLAN_HEADROOM <= limit < peak * PLAN_HEADROOM + 1024**2
    assert parse_quantity(resources["requests"]["memory"]) == limit
    assert resources["limits"].get("cpu") == (raw.get("resources") or {}).get("limits", {}).get(
        "cpu"
    )


def test_the_405b_shard_on_one_rank_is_bounded_by_its_plan() -> None:
    raw = {"worldSize": 1, "model": "llama3-405b", "checkpointPath": "gs://bucket/x"}
    limit = parse_quantity(container(raw)["resources"]["limits"]["memory"])
    assert limit > 800 * GIB  # the shard is the whole model: the pod stays Pending, not OOM


def test_a_mixtral_rank_is_bounded_by_its_eighth_of_the_model() -> None:
    raw = {"worldSize": 8, "model": "mixtral-8x7b", "checkpointPath": "gs://bucket/x"}
    limit = parse_quantity(container(raw)["resources"]["limits"]["memory"])
    # 46.7B parameters at 12 B each over 8 ranks is 65.2 GiB a rank, before the plan's headroom.
    assert 65.2 * GIB * PLAN_HEADROOM < limit < 66 * GIB * PLAN_HEADROOM


def test_a_given_limit_is_kept_and_a_larger_request_raises_the_planned_limit() -> None:
    base = {"worldSize": 2, "layerSize": 1000, "paddingSize": 4, "checkpointPath": "gs://bucket/x"}
    given = {"limits": {"memory": "8Gi"}, "requests": {"memory": "6Gi"}}
    assert container({**base, "resources": given})["resources"] == given
    only_limit = container({**base, "resources": {"limits": {"memory": "8Gi"}}})["resources"]
    assert only_limit["requests"]["memory"] == "8Gi"
    big_request = container({**base, "resources": {"requests": {"memory": "20Gi"}}})["resources"]
    assert big_request["limits"]["memory"] == "20480Mi"


def test_a_limit_below_the_plan_is_refused_by_field() -> None:
    raw = {
        "worldSize": 1,
        "model": "llama3-405b",
        "checkpointPath": "gs://bucket/x",
        "resources": {"limits": {"memory": "64Gi"}},
    }
    with pytest.raises(SpecError, match=r"^spec\.resources\.limits\.memory: a rank needs about"):
        parse_spec(raw)
