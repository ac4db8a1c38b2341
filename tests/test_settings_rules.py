"""Each rule on the benchmark's settings is declared once (``settings.SETTINGS_RULES``) and reaches
both of its enforcers: the CRD (its CEL, evaluated with cel-python, and the spec model's twin) and
the rank's config (``WorkloadConfig`` refuses, naming the field in snake_case).

``VIOLATIONS`` is written apart from the table, one case per rule: a rule dropped from the table,
a check inverted or a rule left out of either enforcer makes a case below fail.
"""

from __future__ import annotations

import json
from string import Formatter
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from ckptbench.operator.spec import names as spec_names
from ckptbench.operator.spec.model import RULES, CheckpointBenchmarkSpec
from ckptbench.operator.spec.rules import RULES_OF_THE_CR
from ckptbench.workload.contract.config import ENV_PREFIX, ConfigError, WorkloadConfig, field_errors
from ckptbench.workload.contract.rule import Rule
from ckptbench.workload.contract.settings import SETTINGS_RULES, BenchmarkSettings
from ckptbench.workload.local.options import OPTION_OF, explain
from tests.crd_validation import cel_failures, openapi_schema, schema_errors

BASE: dict[str, Any] = {"checkpoint_path": "gs://bucket/ckpt", "world_size": 4}

# (the field the refusal names, settings that break exactly one rule about it)
VIOLATIONS: list[tuple[str, dict[str, Any]]] = [
    ("model", {"model": "llama3-debug", "layer_size": 10}),
    ("layers", {"layers": 2}),
    ("vocab", {"vocab": 2048}),
    ("load_world_size", {"load_world_size": 2}),
    ("strategy", {"strategy": "full", "model": "llama3-debug"}),
    ("format", {"format": "safetensors"}),
    ("strategy", {"backend": "dataflux", "strategy": "replicated"}),
    ("format", {"format": "torch-save", "strategy": "replicated"}),
    ("compression", {"compression": "zstd", "format": "torch-save"}),
    ("load_shard_offset", {"load_shard_offset": 4}),
    ("padding_size", {"padding_size": 2}),
    ("warmup_samples", {"procedure": "reference", "warmup_samples": 1}),
    ("sample_count", {"procedure": "mlperf", "sample_count": 8}),
    ("save_mode", {"save_mode": "sync", "async_save": True}),
    ("stager", {"staging_async": True}),
    ("stager", {"stager": "default"}),  # with a sync save (neither saveMode nor asyncSave)
    (
        "staging_pinned_memory",
        {"stager": "default", "save_mode": "thread", "staging_pinned_memory": True},
    ),
    (
        "staging_non_blocking_copy",
        {"stager": "default", "save_mode": "thread", "staging_non_blocking_copy": True},
    ),
    ("async_save", {"strategy": "full", "async_save": True}),
    ("save_mode", {"strategy": "full", "save_mode": "thread"}),
    ("save_mode", {"backend": "dataflux", "save_mode": "process"}),
    ("train_every", {"model": "llama3-debug", "load_world_size": 8, "train_every": 10}),
    ("data_loading", {"data_loading": {}}),
    ("data_loading", {"train_every": 4, "data_loading": {"backend": "s3fs"}}),
    ("train_step_ms", {"train_every": 4, "train_step_ms": 5, "data_loading": {}}),
    (
        "data_loading",
        {"train_every": 4, "data_loading": {"format": "npz", "samples_per_file": 4}},
    ),
    (
        "data_loading",
        {
            "train_every": 4,
            "data_loading": {"backend": "dataflux", "files": 3, "samples_per_file": 2},
        },
    ),
    (
        "data_loading",
        {"train_every": 4, "data_loading": {"sample_bytes": 1024**3, "samples_per_file": 8}},
    ),
    ("checkpoint_path", {"checkpoint_path": "s3://bucket/x"}),
    ("checkpoint_path", {"backend": "s3", "checkpoint_path": "gs://bucket/x"}),
]
IDS = [f"{field}-{'-'.join(values)}" for field, values in VIOLATIONS]


def _settings(values: dict[str, Any]) -> BenchmarkSettings:
    # BenchmarkSettings checks each field alone; the rules run in its subclasses.
    return BenchmarkSettings.model_validate({**BASE, **values})


def _broken(values: dict[str, Any]) -> list[Rule[BenchmarkSettings]]:
    settings = _settings(values)
    return [rule for rule in SETTINGS_RULES if not rule.check(settings)]


def _benchmark(values: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": spec_names.API_VERSION,
        "kind": spec_names.KIND,
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {to_camel(name): _camel(value) for name, value in {**BASE, **values}.items()},
    }


def test_the_base_keeps_every_rule_everywhere() -> None:
    assert _broken({}) == []
    assert cel_failures(_benchmark({})) == []
    CheckpointBenchmarkSpec.model_validate(_benchmark({})["spec"])
    WorkloadConfig.model_validate(BASE)


def test_every_rule_of_the_table_has_its_violation() -> None:
    """One case per rule, each breaking that rule alone: a rule dropped from the table (or one
    added without a case here) fails this."""
    broken = [_broken(values) for _, values in VIOLATIONS]
    assert all(len(rules) == 1 for rules in broken), broken
    assert [rules[0] for rules in broken] == list(SETTINGS_RULES)


@pytest.mark.parametrize(("field", "values"), VIOLATIONS, ids=IDS)
def test_a_violation_is_refused_by_the_config_naming_its_field(
    field: str, values: dict[str, Any]
) -> None:
    (rule,) = _broken(values)
    assert rule.field == field
    with pytest.raises(ValidationError) as info:
        WorkloadConfig.model_validate({**BASE, **values})
    (problem,) = field_errors(info.value)
    assert problem.field == field
    # The one message, in snake_case, with the values the config has.
    assert problem.reason.startswith(rule.text(str) + " (got "), problem.reason
    assert f"{field}=" in problem.reason
    # ... and each audience of the config names it its own way: the variable; ckptbench run
    # names every field of the message, and of its values, as its option.
    said = explain(info.value)
    assert said.startswith(f"{OPTION_OF[field]}: {rule.text(lambda f: OPTION_OF.get(f, f))}")
    assert all(f"{OPTION_OF[name]}=" in said for name in rule.named if name in OPTION_OF), said
    env = {
        ENV_PREFIX + name.upper(): _env_value(value) for name, value in {**BASE, **values}.items()
    }
    with pytest.raises(ConfigError) as refused:
        WorkloadConfig.from_env(env)
    assert f"{ENV_PREFIX}{field.upper()} ({field}): {rule.text(str)}" in str(refused.value)


def _camel(value: Any) -> Any:
    """A group of settings (dataLoading) as the CR spells it."""
    return {to_camel(k): v for k, v in value.items()} if isinstance(value, dict) else value


def _env_value(value: Any) -> str:
    if isinstance(value, dict):  # a group of settings: one JSON value
        return json.dumps(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


@pytest.mark.parametrize(("field", "values"), VIOLATIONS, ids=IDS)
def test_a_violation_is_refused_by_the_crd_and_the_spec_naming_its_field(
    field: str, values: dict[str, Any]
) -> None:
    (rule,) = _broken(values)
    obj = _benchmark(values)
    assert schema_errors(obj) == []  # the CEL refuses it, not the schema
    assert cel_failures(obj) == [f"spec.{to_camel(field)}: {rule.message}"]
    with pytest.raises(ValidationError) as info:
        CheckpointBenchmarkSpec.model_validate(obj["spec"])
    assert rule.message in str(info.value)


def test_the_crd_carries_the_settings_rules_first_then_the_crs() -> None:
    carried = openapi_schema()["properties"]["spec"]["x-kubernetes-validations"]
    assert (*SETTINGS_RULES, *RULES_OF_THE_CR) == RULES
    assert carried[: len(SETTINGS_RULES)] == [rule.to_crd() for rule in SETTINGS_RULES]


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.field)
def test_a_message_names_declared_fields_in_each_audiences_spelling(rule: Rule[Any]) -> None:
    named = [f for _, f, _, _ in Formatter().parse(rule.reason) if f]
    fields = CheckpointBenchmarkSpec.model_fields
    assert all(name in fields for name in (rule.field, *named)), (rule.field, named)
    assert rule.named == tuple(dict.fromkeys([rule.field, *named]))
    assert rule.message == f"{to_camel(rule.field)} {rule.text(to_camel)}"
    assert "{" not in rule.message and "_" not in rule.message.split(":")[0]
