"""The DataLoadingBenchmark examples (examples/data-loading/): each is a valid object of the CRD
(schema and CEL), the spec model takes it, ``ckptbench render -f`` renders every one into a
JobSet that validates against the JobSet schema with restricted pods, and between them they cover
every preset the docs name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ckptbench.operator.data import crd
from ckptbench.operator.data.model import parse_data_spec
from ckptbench.operator.data.names import KIND
from ckptbench.operator.spec.names import API_VERSION, validate_name
from ckptbench.workload.contract.data.choices import DataPreset
from tests.crd_validation import cel_failures, schema_errors
from tests.k8s_schemas import validate, validate_pod_template
from tests.pod_security import RESTRICTED
from tests.test_examples import chart_default_image

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples" / "data-loading").glob("*.yaml"))
BENCHMARKS = [
    (path, doc) for path in EXAMPLES for doc in yaml.safe_load_all(path.read_text()) if doc
]


def test_the_examples_hold_only_data_loading_benchmarks() -> None:
    assert len(EXAMPLES) >= 10
    for path, doc in BENCHMARKS:
        assert (doc.get("apiVersion"), doc.get("kind")) == (API_VERSION, KIND), path.name


@pytest.mark.parametrize(
    "doc", [doc for _, doc in BENCHMARKS], ids=[doc["metadata"]["name"] for _, doc in BENCHMARKS]
)
def test_each_is_a_valid_object_of_the_crd_and_the_model(doc: dict[str, Any]) -> None:
    assert schema_errors(doc, crd.build_crd()) == []
    assert cel_failures(doc, crd.build_crd()) == []
    assert validate_name(doc["metadata"]["name"]) is None
    assert "namespace" not in doc["metadata"], "let kubectl -n choose"
    parse_data_spec(doc["spec"])


def test_between_them_every_preset_and_the_readers_of_both_stores() -> None:
    specs = [parse_data_spec(doc["spec"]) for _, doc in BENCHMARKS]
    assert {s.preset for s in specs} == set(DataPreset)
    assert {s.backend.value for s in specs} >= {"dataflux", "gcs", "s3", "s3fs"}
    parquet = sorted(s.world_size for s in specs if s.preset is DataPreset.FINEWEB_PARQUET)
    assert parquet == [2, 100, 200, 500]
    assert any(s.s3_endpoint and s.s3_credentials_secret for s in specs)  # MinIO
    assert any(s.backend.value == "s3" and s.s3_endpoint is None for s in specs)  # AWS


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    """``ckptbench render -f examples/data-loading/``, with what the examples ask the admin to
    allow."""
    args = [sys.executable, "-m", "ckptbench.cli", "render", "-f", str(EXAMPLES[0].parent)]
    args += ["--default-image", chart_default_image()]
    args += ["--allow-secret", "minio-keys", "--allow-service-account", "s3-reader"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_every_example_renders_to_a_schema_valid_jobset_of_restricted_pods(
    rendered: list[dict[str, Any]],
) -> None:
    assert sorted(j["metadata"]["name"] for j in rendered) == sorted(
        d["metadata"]["name"] for _, d in BENCHMARKS
    )
    for jobset in rendered:
        validate(jobset)
        template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        validate_pod_template(template)
        assert template["spec"]["containers"][0]["command"] == ["ckptbench", "data-worker"]
        for control, check in RESTRICTED.items():
            assert check(template["spec"]) == [], (jobset["metadata"]["name"], control)


def test_without_the_admins_allow_lists_the_credentialed_examples_are_refused() -> None:
    args = [sys.executable, "-m", "ckptbench.cli", "render", "-f", str(EXAMPLES[0].parent)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2 and result.stdout == ""
    assert (
        "minio.yaml (document 1): spec.s3CredentialsSecret: 'minio-keys' is not allowed"
        in result.stderr
    ), result.stderr
    assert "s3.yaml (document 1): spec.serviceAccountName: 's3-reader' is not allowed" in (
        result.stderr
    ), result.stderr


def test_the_cluster_doc_names_every_spec_field_and_every_example() -> None:
    from pydantic.alias_generators import to_camel

    from ckptbench.operator.data.model import DataLoadingBenchmarkSpec

    doc = (ROOT / "docs" / "data-loading-cluster.md").read_text()
    fields = [to_camel(name) for name in DataLoadingBenchmarkSpec.model_fields]
    assert [f for f in fields if f"`{f}`" not in doc] == []
    assert [p.name for p in EXAMPLES if f"`{p.name}`" not in doc] == []
