"""Rendering a DataLoadingBenchmark into a JobSet: schema-valid, restricted pods running
``ckptbench data-worker`` with the data config's environment, memory from the data plan, the
admin's allow-lists enforced by name; and ``ckptbench render -f`` dispatching on kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ckptbench.operator import render_cli
from ckptbench.operator.data.model import parse_data_spec
from ckptbench.operator.data.names import KIND, WORKER_COMMAND
from ckptbench.operator.data.render import data_config, data_labels, render_data_jobset
from ckptbench.operator.render.jobset import RenderDefaults, RenderError
from ckptbench.operator.render.labels import KUEUE_QUEUE_LABEL, LABEL_BENCHMARK, LABEL_KIND
from ckptbench.operator.render.liveness import HEARTBEAT_FILE
from ckptbench.operator.render.resources import PLAN_HEADROOM
from ckptbench.operator.spec.parse import SpecError
from ckptbench.operator.spec.policy import Policy
from ckptbench.workload.contract.data import memory
from ckptbench.workload.contract.data.config import DataConfig
from tests.k8s_schemas import validate, validate_pod_template
from tests.pod_security import RESTRICTED

NAMESPACE = "bench"
UID = "5f0c2a9e-1b7d-4c1e-9a51-0d4c7b3e2f10"
IMAGE = "registry.example/ckptbench-workload:1.0"
POLICY = Policy(
    image=IMAGE,
    service_accounts=frozenset({"reader"}),
    secrets=frozenset({"minio-keys"}),
    toleration_keys=frozenset({"dedicated"}),
)
DEFAULTS = RenderDefaults(image=IMAGE, policy=POLICY)
SHARED = {
    "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": "rwx"}}],
    "volumeMounts": [{"name": "shared", "mountPath": "/data"}],
}
CASES: dict[str, dict[str, Any]] = {
    "defaults": {"dataPath": "gs://bucket/data"},
    "parquet-100-nodes-kueue": {
        "dataPath": "gs://bucket/fineweb",
        "backend": "dataflux",
        "preset": "fineweb-parquet",
        "sharding": "file",
        "worldSize": 100,
        "queueName": "team-a",
        "resources": {"requests": {"cpu": "4"}, "limits": {"cpu": "4", "memory": "16Gi"}},
    },
    "minio": {
        "dataPath": "s3://bucket/data",
        "backend": "s3",
        "preset": "dataflux-3mib",
        "s3Endpoint": "http://minio.minio.svc:9000",
        "s3PathStyle": True,
        "s3CredentialsSecret": "minio-keys",
        "worldSize": 4,
    },
    "file-shared": {"dataPath": "/data/set", "backend": "file", "worldSize": 2, **SHARED},
    "every-pod-option": {
        "dataPath": "gs://bucket/data",
        "serviceAccountName": "reader",
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        "nodeSelector": {"pool": "cpu"},
        "maxRestarts": 2,
        "activeDeadlineSeconds": 3600,
        "imagePullPolicy": "Always",
    },
}


def _render(case: str, name: str = "demo") -> dict[str, Any]:
    spec = parse_data_spec(CASES[case], POLICY)
    return render_data_jobset(name, NAMESPACE, UID, spec, DEFAULTS)


def _job(jobset: dict[str, Any]) -> dict[str, Any]:
    job: dict[str, Any] = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    return job


def _container(jobset: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = _job(jobset)["template"]["spec"]["containers"][0]
    return container


@pytest.mark.parametrize("case", list(CASES))
def test_the_jobset_validates_against_the_jobset_schema(case: str) -> None:
    jobset = _render(case)
    validate(jobset)
    validate_pod_template(_job(jobset)["template"])
    ranks = CASES[case].get("worldSize", 1)
    assert (_job(jobset)["parallelism"], _job(jobset)["completions"]) == (ranks, ranks)


@pytest.mark.parametrize("control", sorted(RESTRICTED))
@pytest.mark.parametrize("case", list(CASES))
def test_pods_comply_with_each_restricted_control(case: str, control: str) -> None:
    assert RESTRICTED[control](_job(_render(case))["template"]["spec"]) == []


@pytest.mark.parametrize("case", list(CASES))
def test_ranks_run_the_data_worker_with_the_configs_environment(case: str) -> None:
    jobset = _render(case)
    container = _container(jobset)
    assert container["command"] == list(WORKER_COMMAND) == ["ckptbench", "data-worker"]
    values = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    spec = parse_data_spec(CASES[case])
    expected = data_config("demo", NAMESPACE, UID, spec)
    # Each pod's rank comes from its completion index; the rank parses the rest back.
    rank = expected.world_size - 1
    parsed = DataConfig.from_env({**values, "CKPTBENCH_RANK": str(rank)})
    assert parsed == expected.model_copy(update={"rank": rank})
    assert parsed.master_addr == f"demo-rank-0-0.demo.{NAMESPACE}.svc"
    assert parsed.heartbeat_file == HEARTBEAT_FILE
    assert parsed.run_id == f"demo-{UID}"
    assert container["ports"][0]["containerPort"] == parsed.master_port
    assert container["livenessProbe"]["exec"]["command"][-2:] == [
        HEARTBEAT_FILE,
        f"{parsed.progress_timeout_seconds:g}",
    ]


def test_the_memory_limit_comes_from_the_data_plan() -> None:
    spec = parse_data_spec(CASES["defaults"])
    resources = _container(_render("defaults"))["resources"]
    planned = memory.estimate(spec).total_bytes
    limit_mib = int(resources["limits"]["memory"].removesuffix("Mi"))
    assert planned * PLAN_HEADROOM <= limit_mib * 1024**2 < planned * PLAN_HEADROOM + 1024**2
    assert resources["requests"]["memory"] == resources["limits"]["memory"]
    # A given limit is kept (the model refused one below the plan).
    given = _container(_render("parquet-100-nodes-kueue"))["resources"]
    assert given["limits"] == {"cpu": "4", "memory": "16Gi"}


def test_labels_name_the_benchmark_and_the_kind_and_the_owner_is_a_data_loading_benchmark() -> None:
    jobset = _render("defaults", "reader-run")
    labels = data_labels("reader-run")
    assert labels[LABEL_BENCHMARK] == "reader-run" and labels[LABEL_KIND] == KIND
    assert _job(jobset)["template"]["metadata"]["labels"] == labels
    assert jobset["metadata"]["labels"] == labels
    (owner,) = jobset["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (KIND, "reader-run", UID)


def test_a_queue_suspends_the_jobset_for_kueue() -> None:
    jobset = _render("parquet-100-nodes-kueue")
    assert jobset["spec"]["suspend"] is True
    assert jobset["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "team-a"
    assert "suspend" not in _render("defaults")["spec"]


def test_s3_credentials_come_from_the_secret_by_key() -> None:
    env = {e["name"]: e for e in _container(_render("minio"))["env"]}
    ref = env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"]) == ("minio-keys", "AWS_SECRET_ACCESS_KEY")


ESCALATIONS: dict[str, tuple[dict[str, Any], str]] = {
    "image": ({"image": "attacker.example/own:1"}, "spec.image"),
    "account": ({"serviceAccountName": "admin"}, "spec.serviceAccountName"),
    "secret-volume": (
        {"volumes": [{"name": "pw", "secret": {"secretName": "prod-db"}}]},
        "spec.volumes[0].secret.secretName",
    ),
    "toleration": ({"tolerations": [{"key": "gpu"}]}, "spec.tolerations[0].key"),
    "priority": ({"priorityClassName": "urgent"}, "spec.priorityClassName"),
}


@pytest.mark.parametrize("case", list(ESCALATIONS))
def test_the_allow_lists_refuse_by_name_in_the_model_and_in_render(case: str) -> None:
    fields, field = ESCALATIONS[case]
    raw = {"dataPath": "gs://bucket/data", **fields}
    with pytest.raises(SpecError) as caught:
        parse_data_spec(raw, POLICY)
    assert str(caught.value).startswith(field), caught.value
    assert "is not allowed by the operator's policy" in str(caught.value)
    # A spec read without the policy (a recorded one) is refused again before anything is made.
    with pytest.raises(RenderError) as refused:
        render_data_jobset("demo", NAMESPACE, UID, parse_data_spec(raw), DEFAULTS)
    assert str(refused.value).startswith(field), refused.value


# -- ckptbench render -f ------------------------------------------------------------------------

DLB = """apiVersion: ckptbench.dev/v1alpha1
kind: DataLoadingBenchmark
metadata: {name: NAME}
spec: {dataPath: gs://bucket/data, worldSize: 2}
"""
CKB = """apiVersion: ckptbench.dev/v1alpha1
kind: CheckpointBenchmark
metadata: {name: NAME}
spec: {checkpointPath: gs://bucket/ckpt, worldSize: 2}
"""


def _render_cli(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, str]:
    path = tmp_path / "in.yaml"
    path.write_text(text)
    code = render_cli.main(["-f", str(path), "--default-image", "img:1", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_render_dispatches_on_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    text = CKB.replace("NAME", "saves") + "---\n" + DLB.replace("NAME", "reads")
    code, out, err = _render_cli(tmp_path, text, capsys)
    assert code == 0, err
    jobsets = [d for d in yaml.safe_load_all(out) if d]
    commands = {j["metadata"]["name"]: _container(j)["command"] for j in jobsets}
    assert commands == {"saves": ["ckptbench", "worker"], "reads": ["ckptbench", "data-worker"]}
    owners = {j["metadata"]["name"]: j["metadata"]["ownerReferences"][0]["kind"] for j in jobsets}
    assert owners == {"saves": "CheckpointBenchmark", "reads": KIND}
    for jobset in jobsets:
        validate(jobset)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("{dataPath: gs://bucket/data, worldSise: 2}", "spec.worldSise: Extra inputs"),
        ("{dataPath: s3://bucket/data}", "spec.dataPath must be a gs:// URL for backend"),
        (
            "{dataPath: gs://bucket/data, image: attacker.example/x:1}",
            "spec.image: 'attacker.example/x:1' is not allowed by the operator's policy",
        ),
    ],
    ids=["misspelt-field", "wrong-scheme", "foreign-image"],
)
def test_render_refuses_a_bad_data_loading_benchmark_by_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, says: str
) -> None:
    text = DLB.replace("NAME", "bad").replace("{dataPath: gs://bucket/data, worldSize: 2}", spec)
    code, out, err = _render_cli(tmp_path, text, capsys)
    assert code == render_cli.EXIT_INVALID and out == ""
    assert f"in.yaml (document 1): {says}" in err, err


def test_two_kinds_of_one_name_would_make_one_jobset_and_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = CKB.replace("NAME", "same") + "---\n" + DLB.replace("NAME", "same")
    code, out, err = _render_cli(tmp_path, text, capsys)
    assert code == render_cli.EXIT_INVALID and out == ""
    assert "(document 2): metadata.name: default/same is also" in err, err
