"""The generated CRD: committed file in sync, valid CRD, structural schema, columns, rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic.alias_generators import to_camel

from ckptbench.operator import crd_cli
from ckptbench.operator.spec import crd
from ckptbench.operator.spec import names as spec_names
from ckptbench.operator.spec.crd import SchemaConversionError, build_crd, structural
from ckptbench.operator.spec.model import RULES, CheckpointBenchmarkSpec
from ckptbench.operator.spec.status_schema import BenchmarkStatus, Operation, wire_name
from ckptbench.operator.sweep import crd as sweep_crd
from ckptbench.workload.contract import state_settings, storage_settings
from ckptbench.workload.contract.choices import Backend
from tests.crd_validation import cel_failures, openapi_schema, schema_errors
from tests.k8s_schemas import validate

ROOT = Path(__file__).resolve().parent.parent
CRD_PATH = ROOT / crd.CRD_FILE

# JSONSchemaProps fields of apiextensions.k8s.io/v1 (the keys a CRD schema node may carry).
JSON_SCHEMA_PROPS = {
    "$schema", "$ref", "id", "description", "type", "format", "title", "default", "maximum",
    "exclusiveMaximum", "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern",
    "maxItems", "minItems", "uniqueItems", "multipleOf", "enum", "maxProperties",
    "minProperties", "required", "items", "allOf", "oneOf", "anyOf", "not", "properties",
    "additionalProperties", "patternProperties", "dependencies", "additionalItems",
    "definitions", "externalDocs", "example", "nullable", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type", "x-kubernetes-map-type", "x-kubernetes-validations",
}  # fmt: skip
VALIDATION_RULE_KEYS = {"rule", "message", "messageExpression", "reason", "fieldPath"}


def test_committed_crd_is_generated_from_the_model() -> None:
    committed = yaml.safe_load(CRD_PATH.read_text())
    assert committed == build_crd(), (
        f"{crd.CRD_FILE} is out of date with ckptbench.operator.spec; "
        f"run `ckptbench crd > {crd.CRD_FILE}`"
    )


def test_ckptbench_crd_prints_the_committed_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert crd.main([]) == 0
    assert capsys.readouterr().out == CRD_PATH.read_text()


def test_crd_is_a_valid_custom_resource_definition() -> None:
    obj = build_crd()
    validate(obj)
    assert obj["metadata"]["name"] == f"{spec_names.PLURAL}.{spec_names.GROUP}"
    names = obj["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"], names["shortNames"]) == (
        "CheckpointBenchmark",
        "checkpointbenchmarks",
        "checkpointbenchmark",
        ["ckb"],
    )
    assert obj["spec"]["scope"] == "Namespaced"
    (version,) = obj["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


def _walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for name, child in node.get("properties", {}).items():
        found += _walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        found += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += _walk(node["additionalProperties"], f"{path}{{}}")
    return found


def test_schema_is_structural() -> None:
    for path, node in _walk(openapi_schema()):
        assert set(node) <= JSON_SCHEMA_PROPS, (
            f"{path}: unknown keys {set(node) - JSON_SCHEMA_PROPS}"
        )
        for banned in ("$ref", "anyOf", "oneOf", "allOf", "not", "title", "$defs", "nullable"):
            assert banned not in node, f"{path}: {banned} is not allowed here"
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path}: no type"
        assert node.get("additionalProperties") is not False, f"{path}: additionalProperties false"
        assert not ("properties" in node and "additionalProperties" in node), path
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            assert isinstance(node.get(key, False), bool), f"{path}: {key} must be a boolean"
        for rule in node.get("x-kubernetes-validations", []):
            assert set(rule) <= VALIDATION_RULE_KEYS, f"{path}: {rule}"
            field_path = rule.get("fieldPath")
            if field_path:
                assert field_path.lstrip(".") in node["properties"], f"{path}: {field_path}"


def test_every_spec_field_is_described_for_kubectl_explain() -> None:
    spec_schema = openapi_schema()["properties"]["spec"]
    assert spec_schema["description"]
    aliases = {field.alias for field in CheckpointBenchmarkSpec.model_fields.values()}
    assert set(spec_schema["properties"]) == aliases
    for name, node in spec_schema["properties"].items():
        assert len(node.get("description", "")) > 10, f"spec.{name} has no description"


def test_defaults_match_the_model() -> None:
    spec_schema = openapi_schema()["properties"]["spec"]
    dumped = CheckpointBenchmarkSpec(checkpoint_path="gs://bucket/x").model_dump(
        mode="json", by_alias=True
    )
    for name, node in spec_schema["properties"].items():
        if "default" in node:
            assert node["default"] == dumped[name], name
        elif name in ("layerSize", "paddingSize", "format"):
            # No CRD default, so CEL can tell them apart from a model preset; the reference's
            # value applies when absent, and the description says which.
            assert f"Default {dumped[name]}" in node["description"], name
        else:
            # Optional fields: leaving them out means the operator's default or none.
            assert dumped[name] in (None, [], "gs://bucket/x"), name
    assert spec_schema["required"] == ["checkpointPath"]


def test_enums_bounds_and_patterns_come_through() -> None:
    props = openapi_schema()["properties"]["spec"]["properties"]
    assert props["backend"]["enum"] == [backend.value for backend in Backend]
    assert props["imagePullPolicy"]["enum"] == ["Always", "IfNotPresent", "Never"]
    assert (props["worldSize"]["minimum"], props["worldSize"]["maximum"]) == (
        1,
        state_settings.MAX_WORLD_SIZE,
    )
    assert props["checkpointPath"]["pattern"] == storage_settings.CHECKPOINT_PATH_PATTERN
    assert props["nodeSelector"]["additionalProperties"] == {"type": "string"}
    assert props["affinity"]["x-kubernetes-preserve-unknown-fields"] is True
    # Volumes, mounts and tolerations name their keys, so a hostPath is refused, not kept; what
    # a volume source holds (a PVC's claimName, a CSI driver's attributes) stays free-form.
    for listed in ("tolerations", "volumes", "volumeMounts"):
        assert "x-kubernetes-preserve-unknown-fields" not in props[listed]["items"], listed
    volume = props["volumes"]["items"]["properties"]
    assert set(volume) == {
        "name",
        "persistentVolumeClaim",
        "csi",
        "emptyDir",
        "configMap",
        "secret",
    }
    assert all(volume[s]["x-kubernetes-preserve-unknown-fields"] for s in set(volume) - {"name"})
    assert props["volumes"]["items"]["required"] == ["name"]


def test_status_is_free_form_and_printer_columns_read_the_status_fields() -> None:
    (version,) = build_crd()["spec"]["versions"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["x-kubernetes-preserve-unknown-fields"] is True
    columns = {column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]}
    assert columns == {
        "Phase": ".status.phase",
        "Ranks": ".status.ranksSummary",
        "Size": ".status.checkpointSize",
        "Save(s)": ".status.save.meanSeconds",
        "Load(s)": ".status.load.meanSeconds",
        "Throughput": ".status.save.throughput",
        "Age": ".metadata.creationTimestamp",
        "Backend": ".spec.backend",
        "Model": ".spec.model",
        "Load Throughput": ".status.load.throughput",
        "Reason": ".status.reason",
    }


def test_status_is_typed_for_kubectl_explain() -> None:
    status = openapi_schema()["properties"]["status"]
    save = status["properties"]["save"]
    assert save["type"] == "object"
    assert "max over ranks per sample" in save["properties"]["meanSeconds"]["description"]
    assert status["properties"]["reason"]["type"] == "string"
    condition = status["properties"]["conditions"]["items"]
    assert set(condition["required"]) >= {"type", "status", "reason", "lastTransitionTime"}
    assert condition["properties"]["status"]["enum"] == ["True", "False", "Unknown"]


@pytest.mark.parametrize("kind", ["benchmark", "sweep"])
def test_every_status_field_is_described_for_kubectl_explain(kind: str) -> None:
    the_crd = build_crd() if kind == "benchmark" else sweep_crd.build_crd()
    status = openapi_schema(the_crd)["properties"]["status"]
    # kubectl explain describes a list or a map by its field's description, not its items'.
    fields = [(path, node) for path, node in _walk(status) if not path.endswith(("[]", "}"))]
    assert len(fields) > 20
    for path, node in fields:
        assert len(node.get("description", "")) > 5, f"status{path} has no description"


def test_status_schema_is_the_models() -> None:
    status = openapi_schema()["properties"]["status"]
    assert status == {
        **crd.model_schema(BenchmarkStatus),
        "x-kubernetes-preserve-unknown-fields": True,
    }
    declared = {wire_name(name) for name in BenchmarkStatus.model_fields}
    assert set(status["properties"]) == declared
    save = status["properties"]["save"]["properties"]
    assert set(save) == {f.alias for f in Operation.model_fields.values()}
    # The workload's summary, plus what the status adds; the wire names the status always had.
    assert {"planningSeconds", "gcSeconds", "throughput", "slowestRankPod"} <= set(save)


def test_cel_rules_are_the_models_rules() -> None:
    rules = openapi_schema()["properties"]["spec"]["x-kubernetes-validations"]
    assert [(r["rule"], r["message"]) for r in rules] == [(r.cel, r.message) for r in RULES]
    for rule, crd_rule in zip(RULES, rules, strict=True):
        assert rule.message.startswith(to_camel(rule.field) + " "), rule.message
        assert crd_rule["fieldPath"] == "." + to_camel(rule.field)


def _benchmark(name: str = "demo", **spec_fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": spec_names.API_VERSION,
        "kind": spec_names.KIND,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"checkpointPath": "gs://bucket/ckpt", **spec_fields},
    }


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"worldSize": 1, "paddingSize": 1, "layerSize": 1},
        {
            "backend": "file",
            "checkpointPath": "/mnt/shared/ckpt",
            "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": "pvc"}}],
            "volumeMounts": [{"name": "shared", "mountPath": "/mnt/shared"}],
        },
        {"queueName": "team-a", "workloadPriorityClassName": "high", "maxRestarts": 2},
        {"resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "20Gi"}}},
        {"model": "llama3-8b", "layers": 2, "worldSize": 8},
        {"model": "llama3-debug", "worldSize": 512},
        {"tolerations": [{"key": "pool", "operator": "Exists"}], "nodeSelector": {"a": "b"}},
    ],
)
def test_valid_benchmarks_pass_schema_and_cel_and_model(fields: dict[str, Any]) -> None:
    obj = _benchmark(**fields)
    assert schema_errors(obj) == []
    assert cel_failures(obj) == []
    CheckpointBenchmarkSpec.model_validate(obj["spec"])


def test_name_length_rule_on_the_whole_object() -> None:
    assert cel_failures(_benchmark("a" * spec_names.MAX_NAME_LENGTH)) == []
    (failure,) = cel_failures(_benchmark("a" * (spec_names.MAX_NAME_LENGTH + 1)))
    assert failure.startswith("metadata.name")


# -- the pydantic -> structural conversion --------------------------------------------------------


def test_structural_inlines_refs_and_drops_null_branches() -> None:
    defs = {"Color": {"enum": ["red", "blue"], "type": "string", "title": "Color"}}
    node = {
        "anyOf": [{"$ref": "#/$defs/Color"}, {"type": "null"}],
        "default": None,
        "description": "A  color,\n  maybe.",
        "title": "Color",
    }
    assert structural(node, defs) == {
        "enum": ["red", "blue"],
        "type": "string",
        "description": "A color, maybe.",
    }


def test_structural_turns_numeric_exclusive_bounds_into_booleans() -> None:
    assert structural({"type": "number", "exclusiveMinimum": 0}, {}) == {
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
    }


def test_structural_keeps_unknown_fields_of_open_objects() -> None:
    assert structural({"type": "object", "additionalProperties": True}, {}) == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    closed = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert structural({**closed, "additionalProperties": False}, {}) == closed


@pytest.mark.parametrize(
    "node",
    [
        {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        {"oneOf": [{"type": "string"}]},
        {"const": 3},
    ],
)
def test_structural_refuses_what_a_crd_cannot_hold(node: dict[str, Any]) -> None:
    with pytest.raises(SchemaConversionError):
        structural(node, {})


def test_reference_doc_names_every_field() -> None:
    doc = (ROOT / "docs" / "spec.md").read_text()
    missing = [
        field.alias
        for field in CheckpointBenchmarkSpec.model_fields.values()
        if f"`{field.alias}`" not in doc
    ]
    assert not missing, f"docs/spec.md does not mention {missing}"


def undescribed_fields(node: dict[str, Any], path: str = "") -> list[str]:
    """Every field under ``node`` (properties, array items' and map values' properties, at any
    depth) whose schema has no description: what `kubectl explain` would show nothing for."""
    missing = []
    for name, field in (node.get("properties") or {}).items():
        where = f"{path}.{name}"
        if not str(field.get("description") or "").strip():
            missing.append(where)
        missing += undescribed_fields(field, where)
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(node.get(key), dict):
            missing += undescribed_fields(node[key], path + suffix)
    return missing


@pytest.mark.parametrize("kind", sorted(crd_cli.KINDS))
def test_every_field_of_every_generated_crd_is_described(kind: str) -> None:
    """So `kubectl explain ckb.spec.volumes.csi` (or any other field) says what it is."""
    generated = crd_cli.KINDS[kind]()
    for version in yaml.safe_load(generated)["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        assert undescribed_fields(schema) == [], f"{kind} {version['name']}: fields without one"


def test_the_description_walk_sees_a_field_deep_in_a_list() -> None:
    schema = {
        "properties": {
            "a": {"description": "x", "items": {"properties": {"b": {"type": "string"}}}},
            "c": {"description": "y", "additionalProperties": {"properties": {"d": {}}}},
        }
    }
    assert undescribed_fields(schema) == [".a[].b", ".c{}.d"]
