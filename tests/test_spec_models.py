"""spec.model in the operator: env rendered for the ranks, exclusivity, and the memory rule."""

from __future__ import annotations

from typing import Any

import pytest

from ckptbench.operator.render.jobset import RenderDefaults, render_jobset
from ckptbench.operator.spec.parse import SpecError, parse_spec
from ckptbench.workload.contract.config import WorkloadConfig

DEFAULTS = RenderDefaults(image="registry.example/ckptbench-workload:1.0")
UID = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
GIB = 1024**3


def _spec(**fields: Any) -> dict[str, Any]:
    return {"checkpointPath": "gs://bucket/ckpt", "worldSize": 8, **fields}


def _env(spec: dict[str, Any]) -> dict[str, str]:
    jobset = render_jobset("demo", "ns", UID, parse_spec(spec), DEFAULTS)
    (container,) = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_a_model_spec_renders_the_model_for_the_ranks_and_no_reference_sizes() -> None:
    env = _env(_spec(model="llama3-8b", layers=2, dtype="mlperf"))
    assert env["CKPTBENCH_MODEL"] == "llama3-8b"
    assert env["CKPTBENCH_LAYERS"] == "2"
    assert env["CKPTBENCH_DTYPE"] == "mlperf" and env["CKPTBENCH_OPTIMIZER"] == "adamw"
    assert "CKPTBENCH_LAYER_SIZE" not in env and "CKPTBENCH_PADDING_SIZE" not in env
    assert env["CKPTBENCH_MEMORY_CHECK"] == "true"
    # What a pod parses back is the same model.
    config = WorkloadConfig.from_env({**env, "CKPTBENCH_RANK": "3"})
    assert config.model_spec is not None and config.model_spec.layers == 2


def test_the_reference_layout_keeps_its_defaults_without_a_model() -> None:
    env = _env(_spec(worldSize=4))
    assert (env["CKPTBENCH_LAYER_SIZE"], env["CKPTBENCH_PADDING_SIZE"]) == ("100000", "196")
    assert "CKPTBENCH_MODEL" not in env


def test_checkpoint_bytes_of_a_model_spec_are_the_models() -> None:
    spec = parse_spec(_spec(model="llama3-8b", dtype="mlperf"))
    assert spec.total_bytes == 14 * 8_030_261_248


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"model": "llama3-8b", "layerSize": 10}, "spec.model is exclusive"),
        ({"model": "llama3-8b", "paddingSize": 196}, "spec.model is exclusive"),
        ({"model": "bert"}, "spec.model: String should match pattern '^(llama3-debug|"),
        ({"model": "llama3-8b", "vocab": 0}, "spec.vocab"),
    ],
)
def test_bad_model_specs_name_the_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(_spec(**fields))
    assert field in str(info.value)


def _limit(memory: str, **fields: Any) -> dict[str, Any]:
    return _spec(resources={"limits": {"memory": memory}}, **fields)


def test_a_memory_limit_below_the_estimate_is_refused_with_the_numbers() -> None:
    # llama3-8b on 8 ranks: 11.22 GiB of state on rank 0, so 8 GiB cannot hold it.
    with pytest.raises(SpecError) as info:
        parse_spec(_limit("8Gi", model="llama3-8b"))
    text = str(info.value)
    assert text.startswith("spec.resources.limits.memory: a rank needs about 1")
    assert "shard or load template 11.22 GiB" in text
    assert "but has 8.00 GiB (resources.limits.memory 8Gi)" in text
    assert "more ranks (worldSize) or fewer layers" in text and "memoryCheck: false" in text
    parse_spec(_limit("16Gi", model="llama3-8b"))  # fits
    forced = _limit("8Gi", model="llama3-8b", memoryCheck=False)
    assert _env(forced)["CKPTBENCH_MEMORY_CHECK"] == "false"


def test_the_reference_table_is_checked_too() -> None:
    # 49 tensors of 400 MB on each of 4 ranks: 18.25 GiB; 16 GiB cannot hold it, 20 GiB can.
    with pytest.raises(SpecError, match=r"shard or load template 18\.25 GiB"):
        parse_spec(_limit("16Gi", worldSize=4))
    parse_spec(_limit("20Gi", worldSize=4))
    parse_spec(_spec(worldSize=4))  # no limit: nothing to compare with


def test_async_save_doubles_the_shard_in_the_estimate() -> None:
    fields = {"model": "llama3-8b", "asyncSave": True}
    with pytest.raises(SpecError, match=r"async staging copy 11\.22 GiB"):
        parse_spec(_limit("24Gi", **fields))
    # Plus DCP's deep copies of its DTensors (those below 32 MiB stay resident): about 32.5 GiB.
    parse_spec(_limit("34Gi", **fields))


def test_a_resharding_load_is_rendered_and_counted_in_the_estimate() -> None:
    env = _env(_spec(model="llama3-debug", loadWorldSize=2))
    assert env["CKPTBENCH_LOAD_WORLD_SIZE"] == "2"
    # llama3-8b loaded by 2 of 8 ranks: a loading rank holds a quarter, 22.4 GiB, not 11.2.
    with pytest.raises(SpecError, match=r"shard or load template 44\.8"):
        parse_spec(_limit("40Gi", model="llama3-8b", loadWorldSize=2))
