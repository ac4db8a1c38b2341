"""Rendering a CheckpointBenchmark into a JobSet: table-driven, every object schema-validated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from ckptbench.operator import render_cli
from ckptbench.operator.render.jobset import RenderDefaults, RenderError, render_jobset, spec_hash
from ckptbench.operator.render.labels import benchmark_labels
from ckptbench.operator.render.liveness import HEARTBEAT_FILE
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.parse import parse_spec
from ckptbench.operator.spec.policy import Policy
from ckptbench.operator.sweep.cells import child_name
from ckptbench.operator.sweep.cells import expand as expand_cells
from ckptbench.operator.sweep.model import parse_sweep
from ckptbench.workload.contract.choices import Backend
from ckptbench.workload.contract.config import WorkloadConfig
from tests.crd_validation import closed
from tests.k8s_schemas import schema_for, validate, validate_pod_template

NAMESPACE = "bench"
UID = "5f0c2a9e-1b7d-4c1e-9a51-0d4c7b3e2f10"
# An admin who allows the image, service account, toleration and priority class the
# every-pod-option case uses.
DEFAULT_IMAGE = "registry.example/ckptbench-workload:1.0"
POLICY = Policy(
    image=DEFAULT_IMAGE,
    image_prefixes=frozenset({"registry.example/"}),
    service_accounts=frozenset({"ckpt-writer"}),
    toleration_keys=frozenset({"dedicated"}),
    priority_class_names=frozenset({"batch-high"}),
)
DEFAULTS = RenderDefaults(image=DEFAULT_IMAGE, policy=POLICY)
TMP_VOLUME = {"name": "ckptbench-tmp", "emptyDir": {}}
TMP_MOUNT = {"name": "ckptbench-tmp", "mountPath": "/tmp"}
PVC_VOLUME = {"name": "shared", "persistentVolumeClaim": {"claimName": "ckpt-rwx"}}
PVC_MOUNT = {"name": "shared", "mountPath": "/mnt/shared"}

# name -> spec (camelCase, as in a manifest)
CASES: dict[str, dict[str, Any]] = {
    "ws1-gcs": {"worldSize": 1, "checkpointPath": "gs://bench-bucket/ckpt"},
    "ws4-gcsfs": {"worldSize": 4, "backend": "gcsfs", "checkpointPath": "gs://bench-bucket/x"},
    "ws35-gcs-kueue": {
        "worldSize": 35,
        "checkpointPath": "gs://bench-bucket/ckpt",
        "queueName": "team-a",
    },
    "ws548-gcs-kueue-priority": {
        "worldSize": 548,
        "paddingSize": 1096,
        "layerSize": 1000,
        "checkpointPath": "gs://bench-bucket/ckpt",
        "queueName": "team-a",
        "workloadPriorityClassName": "benchmarks-low",
        "maxRestarts": 2,
    },
    "ws4-file-pvc": {
        "worldSize": 4,
        "backend": "file",
        "checkpointPath": "/mnt/shared/ckpt",
        "volumes": [PVC_VOLUME],
        "volumeMounts": [PVC_MOUNT],
    },
    "ws1-file-local": {"worldSize": 1, "backend": "file", "checkpointPath": "/tmp/ckpt"},
    "ws4-gcs-every-pod-option": {
        "worldSize": 4,
        "layerSize": 2000,
        "paddingSize": 10,
        "sampleCount": 3,
        "warmupSamples": 0,
        "checkpointPath": "gs://bench-bucket/deep/prefix",
        "project": "my-project",
        "asyncSave": True,
        "verify": False,
        "keepCheckpoints": True,
        "threads": 16,
        "partSizeBytes": 64 * 1024 * 1024,
        "rendezvousTimeoutSeconds": 120,
        "image": "registry.example/custom:2",
        "imagePullPolicy": "Always",
        "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"memory": "16Gi"}},
        "serviceAccountName": "ckpt-writer",
        "priorityClassName": "batch-high",
        "nodeSelector": {"cloud.google.com/gke-nodepool": "cpu-pool"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "bench"}],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {
                                "matchLabels": {"ckptbench.dev/benchmark": "every-pod-option"}
                            },
                        },
                    }
                ]
            }
        },
        "maxRestarts": 1,
        "activeDeadlineSeconds": 3600,
    },
}

# The reference's own mapping, written out so the test does not reuse the code under test.
SPEC_TO_CONFIG = {
    "worldSize": "world_size",
    "layerSize": "layer_size",
    "paddingSize": "padding_size",
    "sampleCount": "sample_count",
    "warmupSamples": "warmup_samples",
    "backend": "backend",
    "checkpointPath": "checkpoint_path",
    "project": "project",
    "asyncSave": "async_save",
    "verify": "verify",
    "keepCheckpoints": "keep_checkpoints",
    "threads": "threads",
    "partSizeBytes": "part_size_bytes",
    "rendezvousTimeoutSeconds": "rendezvous_timeout_seconds",
}


def _name(case: str) -> str:
    return case.split("-", 1)[1]  # e.g. "gcs-kueue": short, DNS-1035


def _render(case: str) -> dict[str, Any]:
    spec = CheckpointBenchmarkSpec.model_validate(CASES[case])
    return render_jobset(_name(case), NAMESPACE, UID, spec, DEFAULTS)


def _job(jobset: dict[str, Any]) -> dict[str, Any]:
    (replicated,) = jobset["spec"]["replicatedJobs"]
    job: dict[str, Any] = replicated["template"]
    return job


def _pod(jobset: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = _job(jobset)["spec"]["template"]
    return pod


def _pod_env(container: dict[str, Any], index: int, node: str) -> dict[str, str]:
    """The environment the kubelet would give the container of pod ``index`` on ``node``."""
    fields = {
        "metadata.annotations['batch.kubernetes.io/job-completion-index']": str(index),
        "spec.nodeName": node,
        "metadata.name": f"pod-{index}",
        "metadata.namespace": NAMESPACE,
    }
    env = {"JOB_COMPLETION_INDEX": str(index)}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


@pytest.mark.parametrize("case", CASES)
def test_jobset_validates_against_the_jobset_and_pod_schemas(case: str) -> None:
    jobset = _render(case)
    validate(jobset)
    # The JobSet CRD schema admits unknown fields (the API server would drop them silently);
    # closed, it catches a misspelt field.
    jsonschema.Draft7Validator(closed(schema_for("jobset.x-k8s.io/v1alpha2", "JobSet"))).validate(
        jobset
    )
    validate_pod_template(_pod(jobset))


@pytest.mark.parametrize("case", CASES)
def test_env_round_trips_into_the_expected_workload_config(case: str) -> None:
    spec = CASES[case]
    name = _name(case)
    (container,) = _pod(_render(case))["spec"]["containers"]
    index = min(3, spec["worldSize"] - 1)
    config = WorkloadConfig.from_env(_pod_env(container, index, "node-a"))
    expected = WorkloadConfig(
        **{SPEC_TO_CONFIG[key]: value for key, value in spec.items() if key in SPEC_TO_CONFIG},
        rank=index,
        run_id=f"{name}-{UID}",
        master_addr=f"{name}-rank-0-0.{name}.{NAMESPACE}.svc",
        heartbeat_file=HEARTBEAT_FILE,
    )
    assert config == expected
    assert config.backend is Backend(spec.get("backend", "gcs"))


@pytest.mark.parametrize("case", CASES)
def test_jobset_shape(case: str) -> None:
    spec = CASES[case]
    name = _name(case)
    jobset = _render(case)
    world_size = spec["worldSize"]

    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert jobset["metadata"]["name"] == name
    assert jobset["metadata"]["namespace"] == NAMESPACE
    assert jobset["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "ckptbench.dev/v1alpha1",
            "kind": "CheckpointBenchmark",
            "name": name,
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert jobset["spec"]["network"] == {
        "enableDNSHostnames": True,
        "subdomain": name,
        "publishNotReadyAddresses": True,
    }
    assert jobset["spec"]["failurePolicy"] == {"maxRestarts": spec.get("maxRestarts", 0)}
    assert jobset["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["rank"]}
    (replicated,) = jobset["spec"]["replicatedJobs"]
    assert (replicated["name"], replicated["replicas"]) == ("rank", 1)

    job = _job(jobset)["spec"]
    assert job["completionMode"] == "Indexed"
    assert job["parallelism"] == job["completions"] == world_size
    assert job["backoffLimit"] == 0
    assert job.get("activeDeadlineSeconds") == spec.get("activeDeadlineSeconds")

    pod = _pod(jobset)
    assert pod["metadata"]["labels"] == benchmark_labels(name)
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    assert container["name"] == "worker"
    assert container["command"] == ["ckptbench", "worker"]
    assert container["image"] == spec.get("image", DEFAULTS.image)
    assert container["imagePullPolicy"] == spec.get("imagePullPolicy", "IfNotPresent")
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    env = {var["name"]: var for var in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["CKPTBENCH_TERMINATION_LOG"]["value"] == container["terminationMessagePath"]
    # Every pod hostname is a valid DNS label.
    assert len(f"{name}-rank-0-{world_size - 1}") <= 63

    for key, pod_key in [
        ("serviceAccountName", "serviceAccountName"),
        ("priorityClassName", "priorityClassName"),
        ("nodeSelector", "nodeSelector"),
        ("tolerations", "tolerations"),
        ("affinity", "affinity"),
    ]:
        assert pod["spec"].get(pod_key) == spec.get(key), key
    given = spec.get("resources") or {}
    resources = container["resources"]
    assert set(resources["limits"]) >= {"memory"} and set(resources["requests"]) >= {"memory"}
    for kind in ("limits", "requests"):
        assert resources[kind].items() >= (given.get(kind) or {}).items(), kind
    # The operator's emptyDir for temporary files comes first: the root filesystem is read-only.
    assert pod["spec"]["volumes"] == [TMP_VOLUME, *spec.get("volumes", [])]
    assert container["volumeMounts"] == [TMP_MOUNT, *spec.get("volumeMounts", [])]


@pytest.mark.parametrize("case", CASES)
def test_kueue_labels_and_suspend_only_with_a_queue(case: str) -> None:
    spec = CASES[case]
    name = _name(case)
    jobset = _render(case)
    expected = benchmark_labels(name)
    if "queueName" in spec:
        expected["kueue.x-k8s.io/queue-name"] = spec["queueName"]
        assert jobset["spec"]["suspend"] is True
    else:
        assert "suspend" not in jobset["spec"]
    if "workloadPriorityClassName" in spec:
        expected["kueue.x-k8s.io/priority-class"] = spec["workloadPriorityClassName"]
    assert jobset["metadata"]["labels"] == expected
    # Kueue reads its labels from the JobSet only; pods carry the benchmark's labels.
    assert _pod(jobset)["metadata"]["labels"] == benchmark_labels(name)


def test_benchmark_labels() -> None:
    assert benchmark_labels("demo") == {
        "app.kubernetes.io/name": "ckptbench",
        "app.kubernetes.io/managed-by": "ckptbench-operator",
        "ckptbench.dev/benchmark": "demo",
    }


def test_rendering_is_deterministic_and_the_spec_hash_follows_the_spec() -> None:
    spec = CheckpointBenchmarkSpec.model_validate(CASES["ws4-gcsfs"])
    assert render_jobset("a", "ns", UID, spec, DEFAULTS) == render_jobset(
        "a", "ns", UID, spec, DEFAULTS
    )
    changed = spec.model_copy(update={"sample_count": spec.samples + 1})
    assert spec_hash(changed) != spec_hash(spec)


def test_no_owner_reference_on_request() -> None:
    spec = CheckpointBenchmarkSpec.model_validate(CASES["ws1-gcs"])
    jobset = render_jobset("a", "ns", UID, spec, DEFAULTS, owner=False)
    assert "ownerReferences" not in jobset["metadata"]
    validate(jobset)


@pytest.mark.parametrize(
    ("name", "namespace", "uid", "defaults", "field"),
    [
        ("demo", "ns", UID, RenderDefaults(image=None), "spec.image"),
        ("Demo", "ns", UID, DEFAULTS, "metadata.name"),
        ("d" * 52, "ns", UID, DEFAULTS, "metadata.name"),
        ("demo", "", UID, DEFAULTS, "metadata.namespace"),
        ("demo", "ns", "", DEFAULTS, "metadata.uid"),
    ],
)
def test_render_errors_name_the_field(
    name: str, namespace: str, uid: str, defaults: RenderDefaults, field: str
) -> None:
    spec = CheckpointBenchmarkSpec.model_validate(CASES["ws1-gcs"])
    with pytest.raises(RenderError, match=field.replace(".", r"\.")):
        render_jobset(name, namespace, uid, spec, defaults)


# -- ckptbench render ---------------------------------------------------------------------------


def _manifest(name: str, spec: Any, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ckptbench.dev/v1alpha1",
        "kind": "CheckpointBenchmark",
        "metadata": {"name": name, **metadata},
        "spec": spec,
    }


def _write(tmp_path: Path, *documents: Any) -> str:
    path = tmp_path / "benchmark.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return str(path)


def test_cli_renders_every_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(
        tmp_path,
        _manifest("first", CASES["ws4-file-pvc"], namespace="team"),
        _manifest("second", CASES["ws35-gcs-kueue"]),
    )
    assert render_cli.main(["-f", path, "--default-image", "img:1"]) == 0
    out = capsys.readouterr().out
    jobsets = [doc for doc in yaml.safe_load_all(out) if doc]
    assert [(j["metadata"]["namespace"], j["metadata"]["name"]) for j in jobsets] == [
        ("team", "first"),
        ("default", "second"),
    ]
    for jobset in jobsets:
        validate(jobset)
        validate_pod_template(_pod(jobset))
        assert jobset["metadata"]["ownerReferences"][0]["uid"] == render_cli.DRY_RUN_UID
        assert _pod(jobset)["spec"]["containers"][0]["image"] == "img:1"
    assert f"uid {render_cli.DRY_RUN_UID} is a dry-run placeholder" in out


def test_cli_uses_a_given_uid_or_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _manifest("demo", CASES["ws1-gcs"]))
    assert render_cli.main(["-f", path, "--default-image", "i", "--uid", UID]) == 0
    out = capsys.readouterr().out
    (jobset,) = [doc for doc in yaml.safe_load_all(out) if doc]
    assert jobset["metadata"]["ownerReferences"][0]["uid"] == UID
    assert "placeholder" not in out

    assert render_cli.main(["-f", path, "--default-image", "i", "--no-owner-reference"]) == 0
    out = capsys.readouterr().out
    (jobset,) = [doc for doc in yaml.safe_load_all(out) if doc]
    assert "ownerReferences" not in jobset["metadata"]
    assert "placeholder" not in out


@pytest.mark.parametrize(
    ("documents", "named"),
    [
        ([_manifest("demo", {**CASES["ws1-gcs"], "worldSize": "four"})], "spec.worldSize"),
        ([_manifest("demo", {**CASES["ws4-gcsfs"], "paddingSize": 2})], "spec.paddingSize"),
        ([_manifest("Not_A_Name", CASES["ws1-gcs"])], "metadata.name"),
        ([{**_manifest("demo", CASES["ws1-gcs"]), "kind": "Job"}], "kind"),
        ([{**_manifest("demo", CASES["ws1-gcs"]), "apiVersion": "v1"}], "apiVersion"),
        ([{"kind": "CheckpointBenchmark"}], "metadata"),
        ([_manifest("demo", ["not", "a", "map"])], "spec:"),
        ([["a", "list"]], "not a mapping"),
        ([_manifest("ok", CASES["ws1-gcs"]), _manifest("demo", {"worldSize": 2})], "document 2"),
    ],
)
def test_cli_refuses_invalid_documents_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], documents: list[Any], named: str
) -> None:
    path = _write(tmp_path, *documents)
    assert render_cli.main(["-f", path, "--default-image", "i"]) == render_cli.EXIT_INVALID
    captured = capsys.readouterr()
    assert captured.out == ""  # all or nothing
    assert named in captured.err


def test_cli_refuses_an_unreadable_file_and_bad_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "missing.yaml")
    assert render_cli.main(["-f", missing, "--default-image", "i"]) == render_cli.EXIT_INVALID
    assert "missing.yaml: cannot read" in capsys.readouterr().err

    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [unclosed\n")
    assert render_cli.main(["-f", str(bad), "--default-image", "i"]) == render_cli.EXIT_INVALID
    assert "not valid YAML" in capsys.readouterr().err


def test_parse_spec_of_a_rendered_case_is_idempotent() -> None:
    spec = parse_spec(CASES["ws4-gcs-every-pod-option"])
    assert parse_spec(spec.model_dump(mode="json", by_alias=True, exclude_none=True)) == spec


def test_the_documented_example_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "spec.md").read_text()
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "example.yaml"
    path.write_text(example)
    args = ["-f", str(path), "--default-image", "img:1"]
    assert render_cli.main([*args, "--allow-service-account", "ckptbench-writer"]) == 0
    (jobset,) = [doc for doc in yaml.safe_load_all(capsys.readouterr().out) if doc]
    validate(jobset)
    assert jobset["spec"]["suspend"] is True


def test_the_default_policy_refuses_tolerations_and_priority_classes_naming_them() -> None:
    spec = parse_spec(CASES["ws4-gcs-every-pod-option"])
    closed = RenderDefaults(image="img:1")
    with pytest.raises(RenderError) as caught:
        render_jobset("a", "ns", UID, spec, closed)
    message = str(caught.value)
    assert "spec.tolerations[0].key: 'dedicated' is not allowed" in message
    assert "spec.priorityClassName: 'batch-high' is not allowed" in message
    assert render_jobset("a", "ns", UID, spec, DEFAULTS)  # what POLICY allows renders


def test_render_cli_takes_the_admins_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _manifest("tolerant", CASES["ws4-gcs-every-pod-option"])
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(doc))
    args = ["-f", str(path), "--default-image", "img:1"]
    assert render_cli.main(args) == render_cli.EXIT_INVALID
    assert "spec.tolerations[0].key" in capsys.readouterr().err
    allow = ["--allow-toleration-key", "dedicated", "--allow-priority-class", "batch-high"]
    allow += ["--allow-image-prefix", "registry.example/", "--allow-service-account", "ckpt-writer"]
    assert render_cli.main([*args, *allow]) == 0


# ---- files, directories, globs and what else a manifest may hold -----------------------------


def _bench(name: str) -> dict[str, Any]:
    return _manifest(name, CASES["ws1-gcs"])


def test_cli_takes_several_files_directories_and_globs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "dir"
    folder.mkdir()
    (folder / "a.yaml").write_text(yaml.safe_dump(_bench("a")))
    (folder / "notes.txt").write_text("not a manifest")
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(_bench("b")))
    (tmp_path / "c.yml").write_text(yaml.safe_dump(_bench("c")))
    args = ["-f", str(folder), str(tmp_path / "b.yaml"), "-f", str(tmp_path / "*.yml")]
    assert render_cli.main([*args, "--default-image", "i"]) == 0
    out = capsys.readouterr().out
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(out) if d]
    assert names == ["a", "b", "c"]


def test_cli_skips_other_kinds_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "ckpt-rwx"},
        "spec": {"accessModes": ["ReadWriteMany"]},
    }
    path = _write(tmp_path, claim, _bench("beside-its-claim"))
    assert render_cli.main(["-f", path, "--default-image", "i"]) == 0
    captured = capsys.readouterr()
    assert "note:" in captured.err and "skipped PersistentVolumeClaim ckpt-rwx" in captured.err
    (jobset,) = [d for d in yaml.safe_load_all(captured.out) if d]
    assert jobset["metadata"]["name"] == "beside-its-claim"


def test_cli_renders_every_example(capsys: pytest.CaptureFixture[str]) -> None:
    examples = str(Path(__file__).resolve().parent.parent / "examples" / "*.yaml")
    # With what the examples' comments ask the admin to allow at install.
    allowed = ["--allow-secret", "minio-keys"]
    assert render_cli.main(["-f", examples, "--default-image", "i", *allowed]) == 0
    assert [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (
            # The shape of an alias bomb (more levels grow past gigabytes), refused unbuilt.
            "apiVersion: ckptbench.dev/v1alpha1\nkind: CheckpointBenchmark\nmetadata: {name: b}\n"
            "spec:\n  checkpointPath: gs://bucket/x\n  affinity:\n"
            "    a: &a [x, x, x, x, x, x, x, x, x]\n    b: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
            "    c: [*b, *b, *b, *b, *b, *b, *b, *b]\n",
            "line 7: YAML anchor 'a'",
        ),
        ("spec: &s {a: 1}\nother: *s\n", "anchors and aliases are not accepted"),
    ],
    ids=["alias-bomb", "plain-alias"],
)
def test_cli_refuses_anchors_and_aliases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, named: str
) -> None:
    path = tmp_path / "bench.yaml"
    path.write_text(content)
    assert render_cli.main(["-f", str(path), "--default-image", "i"]) == render_cli.EXIT_INVALID
    assert named in capsys.readouterr().err


def test_cli_refuses_a_file_that_is_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("metadata: {name: caf\u00e9}\n".encode("latin-1"))
    assert render_cli.main(["-f", str(path), "--default-image", "i"]) == render_cli.EXIT_INVALID
    assert "latin1.yaml: not UTF-8 text (byte 0xe9 at offset 20)" in capsys.readouterr().err


def test_cli_names_a_pattern_or_directory_that_matches_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pattern = str(tmp_path / "*.yaml")
    assert render_cli.main(["-f", pattern, "-f", str(tmp_path)]) == render_cli.EXIT_INVALID
    err = capsys.readouterr().err
    assert f"{pattern}: no file matches" in err
    assert "a directory without *.yaml" in err


def test_a_sweep_renders_the_jobset_of_each_child_the_operator_would_create(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sweep = Path(__file__).resolve().parent.parent / "examples" / "sweeps"
    path = str(sweep / "gcs-vs-gcsfs-threads.yaml")
    assert render_cli.main(["-f", path, "--default-image", "i"]) == 0
    captured = capsys.readouterr()
    jobsets = [d for d in yaml.safe_load_all(captured.out) if d]
    document = yaml.safe_load((sweep / "gcs-vs-gcsfs-threads.yaml").read_text())
    spec = parse_sweep(document["spec"])
    cells = expand_cells(spec)
    name = document["metadata"]["name"]
    assert [j["metadata"]["name"] for j in jobsets] == [child_name(name, c.number) for c in cells]
    # Each child runs its own cell: the backend its cell chose reaches the rank's variables.
    for jobset, cell in zip(jobsets, cells, strict=True):
        pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["CKPTBENCH_BACKEND"] == cell.values["backend"]
    assert f"{len(cells)} cell(s), rendered as its child benchmarks" in captured.err


def test_a_sweep_whose_template_the_policy_refuses_renders_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "apiVersion: ckptbench.dev/v1alpha1\nkind: CheckpointBenchmarkSweep\n"
        "metadata: {name: grid}\nspec:\n  template: {checkpointPath: gs://bucket/x, "
        "image: attacker.example/own:1}\n  axes: {backend: [gcs, gcsfs]}\n"
    )
    assert render_cli.main(["-f", str(path), "--default-image", "i"]) == render_cli.EXIT_INVALID
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "spec.template.image: 'attacker.example/own:1' is not allowed" in captured.err
