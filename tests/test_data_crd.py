"""The DataLoadingBenchmark CRD: generated from its spec model, committed without drift, every field
described, its CEL rules the model's and agreeing with their Python twins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic.alias_generators import to_camel

from ckptbench.operator import crd_cli
from ckptbench.operator.data import crd
from ckptbench.operator.data.model import RULES, DataLoadingBenchmarkSpec
from ckptbench.operator.data.names import KIND, PLURAL
from ckptbench.operator.data.status_schema import DataLoadingStatus
from ckptbench.operator.spec import crd as benchmark_crd
from ckptbench.operator.spec.names import API_VERSION, GROUP, MAX_NAME_LENGTH
from ckptbench.operator.spec.parse import SpecError
from ckptbench.operator.spec.pods import PodSpec
from ckptbench.workload.contract.data.settings import DataSettings
from tests.crd_validation import cel_failures, openapi_schema, schema_errors
from tests.k8s_schemas import validate
from tests.test_crd import undescribed_fields

ROOT = Path(__file__).resolve().parent.parent
CRD_PATH = ROOT / crd.CRD_FILE
CHART_CRD_PATH = ROOT / "charts" / "ckptbench" / crd.CRD_FILE


def test_committed_crd_and_the_charts_copy_are_generated_from_the_model() -> None:
    text = crd.crd_yaml()
    assert CRD_PATH.read_text() == text, f"run `ckptbench crd --kind data > {crd.CRD_FILE}`"
    assert CHART_CRD_PATH.read_text() == text, f"cp {crd.CRD_FILE} charts/ckptbench/crds/"


def test_ckptbench_crd_kind_data_prints_the_committed_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert crd_cli.main(["--kind", "data"]) == 0
    assert capsys.readouterr().out == CRD_PATH.read_text()


def test_crd_is_a_valid_custom_resource_definition_of_the_benchmarks_group() -> None:
    obj = crd.build_crd()
    validate(obj)
    assert obj["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    names = obj["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"], names["categories"]) == (
        "DataLoadingBenchmark",
        "dataloadingbenchmarks",
        ["dlb"],
        ["ckptbench"],
    )
    (version,) = obj["spec"]["versions"]
    benchmark = benchmark_crd.build_crd()["spec"]["versions"][0]
    assert (obj["spec"]["group"], version["name"]) == (GROUP, benchmark["name"])
    assert version["subresources"] == {"status": {}}


def test_every_field_is_described_for_kubectl_explain() -> None:
    schema = openapi_schema(crd.build_crd())
    assert undescribed_fields(schema) == []
    spec = schema["properties"]["spec"]["properties"]
    # The settings and the pods' fields, each under its camelCase name.
    fields = {*DataSettings.model_fields, *PodSpec.model_fields}
    assert set(spec) == {to_camel(f) for f in fields}


def test_the_spec_is_the_data_settings_then_the_pods_fields() -> None:
    spec = openapi_schema(crd.build_crd())["properties"]["spec"]["properties"]
    settings = [to_camel(f) for f in DataSettings.model_fields]
    assert list(spec)[: len(settings)] == settings
    # The pods' fields are the CheckpointBenchmark's, described alike but for resources.
    checkpoint = openapi_schema()["properties"]["spec"]["properties"]
    for name in PodSpec.model_fields:
        if name != "resources":
            assert spec[to_camel(name)] == checkpoint[to_camel(name)], name
    assert "planned peak" in spec["resources"]["description"]


def test_status_is_the_status_models_and_printer_columns_read_real_fields() -> None:
    schema = openapi_schema(crd.build_crd())
    status = schema["properties"]["status"]
    assert set(status["properties"]) == {f.alias or to_camel(n) for n, f in
                                         DataLoadingStatus.model_fields.items()}  # fmt: skip
    (version,) = crd.build_crd()["spec"]["versions"]
    for column in version["additionalPrinterColumns"]:
        where, _, field = column["jsonPath"].lstrip(".").partition(".")
        if where == "metadata":
            continue
        assert field in schema["properties"][where]["properties"], column
        assert (column["type"] == "number") == (
            schema["properties"][where]["properties"][field].get("type") == "number"
        ), column
    shown = [c["name"] for c in version["additionalPrinterColumns"] if "priority" not in c]
    assert shown == ["Phase", "Reader", "Ranks", "Samples/s", "AU", "Throughput", "Age"]


def test_cel_rules_are_the_models_rules() -> None:
    rules = openapi_schema(crd.build_crd())["properties"]["spec"]["x-kubernetes-validations"]
    assert [(r["rule"], r["message"]) for r in rules] == [(r.cel, r.message) for r in RULES]
    for rule in RULES:
        assert rule.message.startswith(to_camel(rule.field) + " "), rule.message


def _benchmark(name: str = "demo", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"dataPath": "gs://bucket/data", **spec},
    }


SHARED = {
    "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": "rwx"}}],
    "volumeMounts": [{"name": "shared", "mountPath": "/data"}],
}


def _file(path: str) -> dict[str, Any]:
    """Two ranks reading ``path`` with reader file, a shared volume mounted at /data."""
    return {"backend": "file", "dataPath": path, "worldSize": 2, **SHARED}


# Specs and the field the API server (CEL) and the operator (Python) both refuse, or None.
CASES: dict[str, tuple[dict[str, Any], str | None]] = {
    "defaults": ({}, None),
    "parquet-by-file": ({"preset": "fineweb-parquet", "sharding": "file"}, None),
    "parquet-by-sample": ({"preset": "fineweb-parquet"}, "sharding"),
    "dataflux-sample": ({"backend": "dataflux", "preset": "dataflux-100kib"}, None),
    "s3-on-gs": ({"backend": "s3", "preset": "dataflux-100kib"}, "dataPath"),
    "gcs-on-s3": ({"dataPath": "s3://bucket/data"}, "dataPath"),
    "s3-on-s3": ({"backend": "s3fs", "dataPath": "s3://bucket/data"}, None),
    "file-on-gs": ({"backend": "file"}, "dataPath"),
    "file-one-rank": ({"backend": "file", "dataPath": "/scratch/data"}, None),
    "file-url": ({"backend": "file", "dataPath": "file:///scratch/data"}, "dataPath"),
    "file-shared-unmounted": (_file("/elsewhere"), "dataPath"),
    "file-shared-mounted": (_file("/data/x"), None),
    "file-backstep": (_file("/data/../etc"), "dataPath"),
    "too-many-ranks": ({"worldSize": 10_001}, "worldSize"),
    "most-ranks": ({"worldSize": 10_000}, None),
    "s3-secret-on-gcs": ({"s3CredentialsSecret": "keys"}, "s3CredentialsSecret"),
    "priority-without-queue": ({"workloadPriorityClassName": "low"}, "workloadPriorityClassName"),
    "control-plane-toleration": (
        {"tolerations": [{"key": "node-role.kubernetes.io/control-plane"}]},
        "tolerations",
    ),
    "file-too-large": (
        {"preset": "mlperf-unet3d", "samplesPerFile": 30, "sharding": "file"},
        "sampleBytes",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cel_and_the_python_twin_agree(case: str) -> None:
    spec, field = CASES[case]
    obj = _benchmark(**spec)
    assert schema_errors(obj, crd.build_crd()) == []
    failures = cel_failures(obj, crd.build_crd())
    if field is None:
        assert failures == []
        DataLoadingBenchmarkSpec.model_validate(obj["spec"])
        return
    assert len(failures) == 1 and failures[0].startswith(f"spec.{field}"), failures
    with pytest.raises(ValueError, match=rf"{field} "):
        DataLoadingBenchmarkSpec.model_validate(obj["spec"])


def test_name_length_rule_on_the_whole_object() -> None:
    assert cel_failures(_benchmark("a" * MAX_NAME_LENGTH), crd.build_crd()) == []
    (failure,) = cel_failures(_benchmark("a" * (MAX_NAME_LENGTH + 1)), crd.build_crd())
    assert failure.startswith("metadata.name")


def test_a_memory_limit_below_the_plan_is_refused_by_the_python_twin() -> None:
    from ckptbench.operator.data.model import parse_data_spec

    with pytest.raises(SpecError, match=r"spec\.resources\.limits\.memory: 100Mi: a rank would"):
        parse_data_spec({"dataPath": "gs://b/x", "resources": {"limits": {"memory": "100Mi"}}})
    assert parse_data_spec({"dataPath": "gs://b/x", "resources": {"limits": {"memory": "8Gi"}}})


def test_a_documented_file_holds_the_crd() -> None:
    # The committed file is YAML with the header that says how to regenerate it.
    text = CRD_PATH.read_text()
    assert text.startswith("# Generated by `ckptbench crd --kind data`")
    assert yaml.safe_load(text)["kind"] == "CustomResourceDefinition"
