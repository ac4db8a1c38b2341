"""An S3 CheckpointBenchmark renders into a JobSet valid against the JobSet and pod schemas, its
pods "restricted"; the S3 settings reach the ranks' config through the one declaration, and
credentials come from a Secret's AWS keys only, or from the pod's identity (no keys at all)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ckptbench.operator.render.jobset import RenderDefaults, render_jobset
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.names import CHART_WORKLOAD_SERVICE_ACCOUNT
from ckptbench.operator.spec.parse import SpecError, parse_spec
from ckptbench.operator.spec.policy import Policy
from ckptbench.workload.contract.config import WorkloadConfig
from tests.k8s_schemas import validate, validate_pod_template
from tests.pod_security import RESTRICTED

ROOT = Path(__file__).resolve().parents[1]
# The admin of these tests allows the example's Secret and the chart's workload account.
DEFAULTS = RenderDefaults(
    image="registry.example/ckptbench-workload:1.0",
    policy=Policy(
        service_accounts=frozenset({CHART_WORKLOAD_SERVICE_ACCOUNT}),
        secrets=frozenset({"minio-keys"}),
    ),
)
MINIO: dict[str, Any] = {
    "worldSize": 2,
    "backend": "s3",
    "checkpointPath": "s3://ckptbench/minio",
    "s3Endpoint": "http://minio.minio.svc:9000",
    "s3Region": "eu-west-3",
    "s3PathStyle": True,
    "s3Threads": 4,
    "s3PrefixStrategy": "hex",
    "s3PartSizeBytes": 16 * 1024 * 1024,
    "s3ThroughputGbps": 25,
    "s3Reader": "sequential",
    "s3CredentialsSecret": "minio-keys",
}


def render(spec: dict[str, Any]) -> dict[str, Any]:
    return render_jobset(
        "s3-bench", "bench", "uid-1", CheckpointBenchmarkSpec.model_validate(spec), DEFAULTS
    )


def container_of(jobset: dict[str, Any]) -> dict[str, Any]:
    (replicated,) = jobset["spec"]["replicatedJobs"]
    pod = replicated["template"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return dict(container)


@pytest.mark.parametrize("control", sorted(RESTRICTED))
def test_an_s3_benchmark_renders_schema_valid_with_restricted_pods(control: str) -> None:
    jobset = render(MINIO)
    validate(jobset)
    (replicated,) = jobset["spec"]["replicatedJobs"]
    template = replicated["template"]["spec"]["template"]
    validate_pod_template(template)
    assert RESTRICTED[control](template["spec"]) == []


def test_the_s3_settings_reach_the_ranks_config() -> None:
    env = container_of(render(MINIO))["env"]
    plain = {v["name"]: v["value"] for v in env if "value" in v}
    config = WorkloadConfig.from_env({**plain, "CKPTBENCH_RANK": "0"})
    assert (config.s3_endpoint, config.s3_region, config.s3_path_style) == (
        "http://minio.minio.svc:9000",
        "eu-west-3",
        True,
    )
    assert (config.s3_threads, config.s3_prefix_strategy.value, config.s3_reader.value) == (
        4,
        "hex",
        "sequential",
    )
    assert config.s3_part_size_bytes == 16 * 1024 * 1024 and config.s3_throughput_gbps == 25


def test_credentials_come_from_the_secret_s_aws_keys_only() -> None:
    env = container_of(render(MINIO))["env"]
    from_secret = {
        v["name"]: v["valueFrom"]["secretKeyRef"]
        for v in env
        if "valueFrom" in v and "secretKeyRef" in v["valueFrom"]
    }
    assert from_secret == {
        "AWS_ACCESS_KEY_ID": {"name": "minio-keys", "key": "AWS_ACCESS_KEY_ID", "optional": False},
        "AWS_SECRET_ACCESS_KEY": {
            "name": "minio-keys",
            "key": "AWS_SECRET_ACCESS_KEY",
            "optional": False,
        },
        "AWS_SESSION_TOKEN": {"name": "minio-keys", "key": "AWS_SESSION_TOKEN", "optional": True},
    }
    assert "envFrom" not in container_of(render(MINIO))


def test_with_pod_identity_no_key_is_rendered() -> None:
    irsa = {k: v for k, v in MINIO.items() if k not in ("s3CredentialsSecret", "s3Endpoint")}
    irsa["serviceAccountName"] = "ckptbench-workload"  # the chart's, annotated for IRSA
    jobset = render(irsa)
    (replicated,) = jobset["spec"]["replicatedJobs"]
    pod = replicated["template"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "ckptbench-workload"
    names = {v["name"] for v in pod["containers"][0]["env"]}
    assert not names & {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}


def test_a_credentials_secret_on_a_gcs_benchmark_is_refused_by_name() -> None:
    with pytest.raises(SpecError, match="s3CredentialsSecret"):
        parse_spec({"checkpointPath": "gs://bucket/x", "s3CredentialsSecret": "keys"})


@pytest.mark.parametrize("name", ["s3-eks-irsa.yaml", "s3-minio.yaml"])
def test_the_s3_examples_parse(name: str) -> None:
    for doc in yaml.safe_load_all((ROOT / "examples" / name).read_text()):
        spec = parse_spec(doc["spec"])
        assert spec.backend.value in ("s3", "s3fs")


def test_a_sweep_over_s3_backends_and_knobs_makes_valid_children() -> None:
    from ckptbench.operator.sweep import cells as sc
    from ckptbench.operator.sweep.model import parse_sweep

    spec = {
        "template": {**MINIO, "s3PrefixStrategy": "none"},
        "axes": {"backend": ["s3", "s3fs"], "s3PrefixStrategy": ["none", "binary"]},
    }
    cells = sc.expand(parse_sweep(spec))
    assert [c.values for c in cells] == [
        {"backend": "s3", "s3PrefixStrategy": "none"},
        {"backend": "s3", "s3PrefixStrategy": "binary"},
        {"backend": "s3fs", "s3PrefixStrategy": "none"},
        {"backend": "s3fs", "s3PrefixStrategy": "binary"},
    ]
    for cell in cells:
        child = sc.render_child("grid", "default", "uid-1", cell)
        parsed = parse_spec(child["spec"])
        assert parsed.checkpoint_path == "s3://ckptbench/minio"
        assert parsed.s3_credentials_secret == "minio-keys"
