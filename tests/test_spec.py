"""The spec model: defaults, names, and every bound inside the workload's own."""

from __future__ import annotations

from typing import Any

import annotated_types
import pytest

from ckptbench.operator.render.labels import master_addr, run_id
from ckptbench.operator.spec import names as spec_names
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.names import (
    MAX_NAME_LENGTH,
    MAX_TOTAL_BYTES,
    validate_name,
)
from ckptbench.operator.spec.parse import SpecError, parse_spec
from ckptbench.workload.contract.choices import Backend
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.state_settings import MAX_WORLD_SIZE

BASE: dict[str, Any] = {"checkpointPath": "gs://bucket/ckpt"}
LONGEST_NAME = "b" * MAX_NAME_LENGTH
LONGEST_UID = "f" * 8 + "-ffff" * 3 + "-" + "f" * 12  # a uid is 36 characters


def test_contract_constants() -> None:
    assert (
        spec_names.GROUP,
        spec_names.VERSION,
        spec_names.KIND,
        spec_names.PLURAL,
        spec_names.SINGULAR,
        spec_names.SHORT_NAME,
    ) == (
        "ckptbench.dev",
        "v1alpha1",
        "CheckpointBenchmark",
        "checkpointbenchmarks",
        "checkpointbenchmark",
        "ckb",
    )


def test_defaults_are_the_references() -> None:
    spec = CheckpointBenchmarkSpec.model_validate(BASE)
    assert (spec.world_size, spec.layer_size, spec.padding_size, spec.samples) == (
        4,
        100_000,
        196,
        8,
    )
    assert spec.backend is Backend.GCS
    # The reference's published table: 73.02 GiB in all.
    assert spec.total_bytes == 196 * 100_000 * 4000
    assert (spec.max_restarts, spec.active_deadline_seconds) == (0, None)


def test_snake_case_and_camel_case_names_both_work() -> None:
    by_alias = CheckpointBenchmarkSpec.model_validate({**BASE, "worldSize": 2, "asyncSave": True})
    by_name = CheckpointBenchmarkSpec(
        checkpoint_path="gs://bucket/ckpt", world_size=2, async_save=True
    )
    assert by_alias == by_name
    assert by_alias.model_dump(by_alias=True)["worldSize"] == 2


def _bounds() -> list[tuple[str, str, int]]:
    """(alias, 'min'|'max', value) for every bounded integer field, read from the model."""
    found = []
    for name, field in CheckpointBenchmarkSpec.model_fields.items():
        for meta in field.metadata:
            if isinstance(meta, annotated_types.Ge):
                found.append((field.alias or name, "min", int(meta.ge)))  # type: ignore[call-overload]
            if isinstance(meta, annotated_types.Le):
                found.append((field.alias or name, "max", int(meta.le)))  # type: ignore[call-overload]
    return found


def _at_bound(alias: str, value: int) -> dict[str, Any]:
    """A valid spec with ``alias`` at ``value``, other fields adjusted to keep the rules."""
    fields: dict[str, Any] = {**BASE, alias: value}
    if alias == "worldSize":
        fields["paddingSize"] = max(196, value)
    if alias in ("worldSize", "paddingSize"):
        fields["layerSize"] = 1
    if alias == "layerSize":
        fields["paddingSize"] = max(1, min(4, MAX_TOTAL_BYTES // (max(value, 1) * 4000)))
        fields["worldSize"] = 1
    if alias == "paddingSize" and value < 4:
        fields["worldSize"] = value
    if alias in ("loadWorldSize", "layers", "vocab"):
        # They act on a model (resharding loads on at most every rank).
        fields = {k: v for k, v in fields.items() if k not in ("layerSize", "paddingSize")}
        fields |= {"model": "llama3-debug"}
        if alias == "loadWorldSize":
            fields["worldSize"] = value
    if alias == "loadShardOffset":
        fields["worldSize"] = 3  # neither bound a multiple of it: another rank's shard
    return fields


BOUNDS = _bounds()


def test_bounds_are_found() -> None:
    aliases = {alias for alias, _, _ in BOUNDS}
    assert {"worldSize", "layerSize", "paddingSize", "partSizeBytes", "maxRestarts"} <= aliases


@pytest.mark.parametrize(("alias", "side", "value"), BOUNDS, ids=[f"{a}-{s}" for a, s, _ in BOUNDS])
def test_every_bound_renders_a_config_the_workload_accepts(
    alias: str, side: str, value: int
) -> None:
    spec = parse_spec(_at_bound(alias, value))
    config = spec.to_workload_config(
        run_id=run_id(LONGEST_NAME, LONGEST_UID), master_addr=master_addr(LONGEST_NAME, "ns")
    )
    # And every rank of it parses back from the environment the pods get.
    for rank in {0, spec.world_size - 1}:
        env = {**config.to_env(), "JOB_COMPLETION_INDEX": str(rank)}
        assert WorkloadConfig.from_env(env) == config.model_copy(update={"rank": rank})


@pytest.mark.parametrize(("alias", "side", "value"), BOUNDS, ids=[f"{a}-{s}" for a, s, _ in BOUNDS])
def test_one_past_every_bound_is_refused(alias: str, side: str, value: int) -> None:
    past = value - 1 if side == "min" else value + 1
    with pytest.raises(SpecError, match=rf"spec\.{alias}\b"):
        parse_spec(_at_bound(alias, past))


def test_largest_checkpoint_is_allowed_one_tensor_more_is_not() -> None:
    layer = 10_000_000
    padding = MAX_TOTAL_BYTES // (layer * 4000)
    assert parse_spec({**BASE, "layerSize": layer, "paddingSize": padding}).total_bytes <= (
        MAX_TOTAL_BYTES
    )
    with pytest.raises(SpecError, match=r"spec\.layerSize"):
        parse_spec({**BASE, "layerSize": layer, "paddingSize": padding + 1})


def test_to_workload_config_carries_every_setting() -> None:
    spec = parse_spec(
        {
            **BASE,
            "worldSize": 2,
            "layerSize": 10,
            "paddingSize": 6,
            "sampleCount": 2,
            "warmupSamples": 0,
            "backend": "gcsfs",
            "project": "proj",
            "asyncSave": True,
            "verify": False,
            "keepCheckpoints": True,
            "threads": 3,
            "partSizeBytes": 2 * 1024 * 1024,
            "rendezvousTimeoutSeconds": 30,
        }
    )
    config = spec.to_workload_config(run_id="r-1", master_addr="h.s.ns.svc")
    assert config == WorkloadConfig(
        world_size=2,
        layer_size=10,
        padding_size=6,
        sample_count=2,
        warmup_samples=0,
        backend=Backend.GCSFS,
        checkpoint_path="gs://bucket/ckpt",
        run_id="r-1",
        project="proj",
        async_save=True,
        verify=False,
        keep_checkpoints=True,
        threads=3,
        part_size_bytes=2 * 1024 * 1024,
        master_addr="h.s.ns.svc",
        rendezvous_timeout_seconds=30.0,
    )


def test_longest_name_keeps_hostnames_and_run_ids_valid() -> None:
    assert validate_name(LONGEST_NAME) is None
    hostname = f"{LONGEST_NAME}-rank-0-{MAX_WORLD_SIZE - 1}"
    assert len(hostname) <= 63
    assert len(hostname) == 63  # the bound is tight, not merely safe
    WorkloadConfig(
        checkpoint_path="/x", backend=Backend.FILE, run_id=run_id(LONGEST_NAME, LONGEST_UID)
    )


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("b" * (MAX_NAME_LENGTH + 1), "too long"),
        ("", "non-empty"),
        ("Demo", "DNS-1035"),
        ("1demo", "DNS-1035"),
        ("demo-", "DNS-1035"),
        ("de.mo", "DNS-1035"),
        ("de_mo", "DNS-1035"),
    ],
)
def test_invalid_names_are_explained(name: str, why: str) -> None:
    reason = validate_name(name)
    assert reason is not None
    assert reason.startswith("metadata.name")
    assert why in reason


@pytest.mark.parametrize("name", ["a", "demo", "ckpt-4-ranks", "x1"])
def test_valid_names(name: str) -> None:
    assert validate_name(name) is None


def test_spec_is_frozen() -> None:
    spec = parse_spec(BASE)
    with pytest.raises(ValueError, match="frozen"):
        spec.world_size = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "samples", "warmups"),
    [
        ({}, 8, 1),
        ({"procedure": "reference"}, 8, 0),
        ({"procedure": "mlperf"}, 10, 0),
        ({"procedure": "reference", "sampleCount": 3, "warmupSamples": 0}, 3, 0),
    ],
)
def test_procedure_reaches_the_workload_with_its_own_counts(
    fields: dict[str, object], samples: int, warmups: int
) -> None:
    spec = CheckpointBenchmarkSpec.model_validate(
        {"checkpointPath": "gs://bucket/ckpt", "worldSize": 2, **fields}
    )
    config = spec.to_workload_config("run", "rank0.host")
    assert (config.samples, config.warmups) == (samples, warmups)
    assert config.procedure.value == fields.get("procedure", "ckptbench")
    assert config.to_env()["CKPTBENCH_PROCEDURE"] == config.procedure.value
    assert config.to_env()["CKPTBENCH_DROP_CACHE"] == "true"


@pytest.mark.parametrize(
    ("fields", "mode"), [({}, "manual"), ({"garbageCollection": "automatic"}, "automatic")]
)
def test_garbage_collection_reaches_the_ranks(fields: dict[str, object], mode: str) -> None:
    spec = CheckpointBenchmarkSpec.model_validate(
        {"checkpointPath": "gs://bucket/ckpt", "worldSize": 2, **fields}
    )
    env = spec.to_workload_config("run", "rank0.host").to_env()
    assert env["CKPTBENCH_GARBAGE_COLLECTION"] == mode
    assert WorkloadConfig.from_env({**env, "CKPTBENCH_RANK": "1"}).garbage_collection.value == mode
