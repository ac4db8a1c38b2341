"""Invalid CheckpointBenchmarks: each is rejected, by a message that names the field, twice.

Once as the API server would (the generated CRD's openAPIV3Schema, then its CEL rules evaluated
with cel-python) and once by the operator's own model (``parse_spec``), which must reject
everything, CEL-only rules included, and never raise anything but ``SpecError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from ckptbench.operator.spec import names as spec_names
from ckptbench.operator.spec.model import RULES
from ckptbench.operator.spec.parse import SpecError, parse_spec
from tests.crd_validation import cel_failures, schema_errors

GOOD: dict[str, Any] = {"checkpointPath": "gs://bucket/ckpt", "worldSize": 4}
PVC = {"name": "shared", "persistentVolumeClaim": {"claimName": "ckpt"}}
PVC_MOUNT = {"name": "shared", "mountPath": "/data"}


@dataclass(frozen=True)
class Case:
    id: str
    spec: Any  # the whole spec (not merged with GOOD when not a dict)
    field: str  # the field every message must name
    by: str  # "schema": the OpenAPI schema rejects it; "cel": only a CEL rule does


def _with(**fields: Any) -> dict[str, Any]:
    return {**GOOD, **fields}


def _without(name: str) -> dict[str, Any]:
    return {key: value for key, value in GOOD.items() if key != name}


CASES = [
    # -- what the OpenAPI schema says ----------------------------------------------------------
    Case("world-size-a-word", _with(worldSize="four"), "worldSize", "schema"),
    Case("world-size-numeric-string", _with(worldSize="4"), "worldSize", "schema"),
    Case("world-size-a-list", _with(worldSize=[4]), "worldSize", "schema"),
    Case("world-size-zero", _with(worldSize=0), "worldSize", "schema"),
    Case("world-size-too-large", _with(worldSize=10_001), "worldSize", "schema"),
    Case("layer-size-negative", _with(layerSize=-1), "layerSize", "schema"),
    Case("sample-count-zero", _with(sampleCount=0), "sampleCount", "schema"),
    Case("warmup-too-many", _with(warmupSamples=101), "warmupSamples", "schema"),
    Case("backend-unknown", _with(backend="azure"), "backend", "schema"),
    Case("path-missing", _without("checkpointPath"), "checkpointPath", "schema"),
    Case("path-relative", _with(checkpointPath="ckpt/here"), "checkpointPath", "schema"),
    Case("path-bad-bucket", _with(checkpointPath="gs://Bad_Bucket/x"), "checkpointPath", "schema"),
    Case("path-whitespace", _with(checkpointPath="/data/my ckpt"), "checkpointPath", "schema"),
    Case("async-save-a-string", _with(asyncSave="yes"), "asyncSave", "schema"),
    Case("threads-zero", _with(threads=0), "threads", "schema"),
    Case("part-size-below-1mib", _with(partSizeBytes=1000), "partSizeBytes", "schema"),
    Case("pull-policy-unknown", _with(imagePullPolicy="Sometimes"), "imagePullPolicy", "schema"),
    Case("service-account-bad", _with(serviceAccountName="My_SA"), "serviceAccountName", "schema"),
    Case("queue-name-too-long", _with(queueName="q" * 64), "queueName", "schema"),
    Case("node-selector-number", _with(nodeSelector={"pool": 1}), "nodeSelector", "schema"),
    Case("tolerations-a-map", _with(tolerations={"key": "x"}), "tolerations", "schema"),
    Case("resources-unknown-key", _with(resources={"cpu": "1"}), "resources", "schema"),
    Case("volume-without-name", _with(volumes=[{"emptyDir": {}}]), "volumes", "schema"),
    Case("volumes-strings", _with(volumes=["shared"]), "volumes", "schema"),
    Case(
        "mount-path-relative",
        _with(volumes=[PVC], volumeMounts=[{"name": "shared", "mountPath": "data"}]),
        "volumeMounts",
        "schema",
    ),
    Case("max-restarts-too-many", _with(maxRestarts=11), "maxRestarts", "schema"),
    Case("deadline-zero", _with(activeDeadlineSeconds=0), "activeDeadlineSeconds", "schema"),
    Case("unknown-field-typo", _with(worldsize=4), "worldsize", "schema"),
    Case("spec-a-list", [GOOD], "spec", "schema"),
    Case("spec-a-string", "worldSize: 4", "spec", "schema"),
    # -- what only the CEL rules (and the model's twins) say ------------------------------------
    Case("padding-below-world-size", _with(paddingSize=2), "paddingSize", "cel"),
    Case("save-mode-sync-but-async", _with(saveMode="sync", asyncSave=True), "saveMode", "cel"),
    Case("default-stager-sync-save", _with(saveMode="sync", stager="default"), "stager", "cel"),
    Case("staging-option-blocking", _with(saveMode="thread", stagingAsync=True), "stager", "cel"),
    Case(
        "staging-pinned-memory",
        _with(saveMode="thread", stager="default", stagingPinnedMemory=True),
        "stagingPinnedMemory",
        "cel",
    ),
    Case(
        "staging-non-blocking-copy",
        _with(saveMode="process", stager="default", stagingNonBlockingCopy=True),
        "stagingNonBlockingCopy",
        "cel",
    ),
    Case("save-mode-unknown", _with(saveMode="fork"), "saveMode", "schema"),
    Case("procedure-unknown", _with(procedure="fast"), "procedure", "schema"),
    Case(
        "reference-with-warmup",
        _with(procedure="reference", warmupSamples=1),
        "warmupSamples",
        "cel",
    ),
    Case("mlperf-with-8-samples", _with(procedure="mlperf", sampleCount=8), "sampleCount", "cel"),
    Case(
        "model-with-layer-size",
        _with(model="llama3-8b", layerSize=10),
        "model",
        "cel",
    ),
    Case(
        "model-with-padding-size",
        _with(model="llama3-8b", paddingSize=10),
        "model",
        "cel",
    ),
    Case("load-world-size-without-model", _with(loadWorldSize=2), "loadWorldSize", "cel"),
    Case(
        "load-world-size-above-the-max",
        _with(model="llama3-debug", loadWorldSize=10_001),
        "loadWorldSize",
        "schema",
    ),
    Case(
        "train-every-on-a-restore-onto-more-ranks",
        _with(model="llama3-debug", loadWorldSize=8, trainEvery=10),
        "trainEvery",
        "cel",
    ),
    Case("data-loading-without-train-every", _with(dataLoading={}), "dataLoading", "cel"),
    Case(
        "data-loading-reading-another-store",
        _with(trainEvery=4, dataLoading={"backend": "s3fs"}),
        "dataLoading",
        "cel",
    ),
    Case(
        "train-step-ms-beside-data-loading",
        _with(trainEvery=4, trainStepMs=5, dataLoading={}),
        "trainStepMs",
        "cel",
    ),
    Case(
        "data-loading-npz-files-sharded-by-sample",
        _with(trainEvery=4, dataLoading={"format": "npz", "samplesPerFile": 4}),
        "dataLoading",
        "cel",
    ),
    Case(
        "data-loading-dataflux-several-samples-a-file",
        _with(trainEvery=4, dataLoading={"backend": "dataflux", "samplesPerFile": 2}),
        "dataLoading",
        "cel",
    ),
    Case(
        "data-loading-files-over-4-gib",
        _with(trainEvery=4, dataLoading={"sampleBytes": 1024**3, "samplesPerFile": 8}),
        "dataLoading",
        "cel",
    ),
    Case(
        "data-loading-batch-size-zero",
        _with(trainEvery=4, dataLoading={"batchSize": 0}),
        "dataLoading.batchSize",
        "schema",
    ),
    Case(
        "load-world-size-zero",
        _with(model="llama3-debug", loadWorldSize=0),
        "loadWorldSize",
        "schema",
    ),
    Case(
        "load-shard-offset-with-model",
        {
            **{k: v for k, v in GOOD.items() if k not in ("layerSize", "paddingSize")},
            "model": "llama3-debug",
            "loadShardOffset": 1,
        },
        "loadShardOffset",
        "cel",
    ),
    Case(
        "load-shard-offset-own-shard",
        _with(loadShardOffset=GOOD["worldSize"]),
        "loadShardOffset",
        "cel",
    ),
    Case(
        "strategy-full-with-model",
        {
            **{k: v for k, v in GOOD.items() if k not in ("layerSize", "paddingSize")},
            "model": "llama3-debug",
            "strategy": "full",
        },
        "strategy",
        "cel",
    ),
    Case("strategy-unknown", _with(strategy="diagonal"), "strategy", "schema"),
    Case("format-unknown", _with(format="gguf"), "format", "schema"),
    Case("format-safetensors-on-gcs", _with(format="safetensors"), "format", "cel"),
    Case(
        "format-safetensors-with-full",
        _with(format="safetensors", strategy="full", backend="file", checkpointPath="/c"),
        "format",
        "cel",
    ),
    Case(
        "format-torch-save-replicated",
        _with(format="torch-save", strategy="replicated"),
        "format",
        "cel",
    ),
    Case("compression-unknown", _with(compression="gzip"), "compression", "schema"),
    Case(
        "compression-with-torch-save",
        _with(compression="zstd", format="torch-save"),
        "compression",
        "cel",
    ),
    Case(
        "compression-with-full",
        _with(compression="zstd", strategy="full"),
        "compression",
        "cel",
    ),
    Case(
        "strategy-full-async",
        _with(strategy="full", asyncSave=True, worldSize=2),
        "asyncSave",
        "cel",
    ),
    Case(
        "strategy-full-process-save",
        _with(strategy="full", saveMode="process", worldSize=2),
        "saveMode",
        "cel",
    ),
    Case(
        "dataflux-process-save",
        _with(backend="dataflux", saveMode="process", asyncSave=True),
        "saveMode",
        "cel",
    ),
    Case(
        "dataflux-replicated",
        _with(backend="dataflux", strategy="replicated"),
        "strategy",
        "cel",
    ),
    Case("model-unknown-preset", _with(model="bert"), "model", "schema"),
    # A config.json path is for local runs: the operator has no file to size the ranks from.
    Case("model-config-path", _with(model="/configs/mixtral.json"), "model", "cel"),
    Case("layers-without-model", _with(layers=2), "layers", "cel"),
    Case("vocab-without-model", _with(vocab=2048), "vocab", "cel"),
    Case("model-zero-layers", _with(model="llama3-8b", layers=0), "layers", "schema"),
    Case(
        "model-unknown-dtype",
        _with(model="llama3-8b", dtype="fp8"),
        "dtype",
        "schema",
    ),
    Case(
        "checkpoint-too-large",
        _with(layerSize=10_000_000, paddingSize=1_000_000),
        "layerSize",
        "cel",
    ),
    Case("gcs-with-local-path", _with(checkpointPath="/data/ckpt"), "checkpointPath", "cel"),
    Case("gcs-with-s3-url", _with(checkpointPath="s3://bucket/x"), "checkpointPath", "cel"),
    Case(
        "s3-with-gs-url",
        _with(backend="s3", checkpointPath="gs://bucket/x"),
        "checkpointPath",
        "cel",
    ),
    Case(
        "s3fs-with-local-path",
        _with(backend="s3fs", checkpointPath="/data/ckpt"),
        "checkpointPath",
        "cel",
    ),
    Case(
        "s3-secret-with-gcs",
        _with(s3CredentialsSecret="minio-keys"),
        "s3CredentialsSecret",
        "cel",
    ),
    Case("path-s3-bucket-short", _with(checkpointPath="s3://ab/x"), "checkpointPath", "schema"),
    Case(
        "file-with-gs-url",
        _with(backend="file", worldSize=1, checkpointPath="gs://bucket/x"),
        "checkpointPath",
        "cel",
    ),
    Case(
        "file-without-shared-volume",
        _with(backend="file", checkpointPath="/data/ckpt"),
        "checkpointPath",
        "cel",
    ),
    Case(
        # One rank saves, two load: the loading pods read what the saving one wrote.
        "file-restore-onto-more-ranks-without-shared-volume",
        _with(
            backend="file",
            worldSize=1,
            model="llama3-debug",
            loadWorldSize=2,
            checkpointPath="/data/ckpt",
        ),
        "checkpointPath",
        "cel",
    ),
    Case(
        "file-path-outside-mounts",
        _with(
            backend="file",
            checkpointPath="/database/ckpt",
            volumes=[PVC],
            volumeMounts=[{"name": "shared", "mountPath": "/data"}],
        ),
        "checkpointPath",
        "cel",
    ),
    Case(
        "file-path-backstep-out-of-the-mount",
        _with(
            backend="file",
            checkpointPath="/data/../etc",
            volumes=[PVC],
            volumeMounts=[{"name": "shared", "mountPath": "/data"}],
        ),
        "checkpointPath",
        "cel",
    ),
    Case(
        "priority-without-queue",
        _with(workloadPriorityClassName="high"),
        "workloadPriorityClassName",
        "cel",
    ),
    Case(
        "mount-of-unknown-volume",
        _with(volumeMounts=[{"name": "shared", "mountPath": "/data"}]),
        "volumeMounts",
        "cel",
    ),
    Case("duplicate-volumes", _with(volumes=[PVC, PVC]), "volumes", "cel"),
]

# Specs that would get their author, through the operator's service account, pods beyond their
# own RBAC (DESIGN.md, "Benchmark pods are not a way around RBAC"). ``field`` is where both the
# schema/CEL and the model must point; ``detail`` is what each message must name besides.
EMPTY_DIR = {"name": "scratch", "emptyDir": {}}
TOKEN = {"serviceAccountToken": {"path": "token", "audience": "https://kubernetes.default.svc"}}


@dataclass(frozen=True)
class Hostile:
    id: str
    spec: dict[str, Any]
    field: str
    detail: str
    by: str


HOSTILE = [
    Hostile(
        "mount-sub-path-upwards",
        _with(volumes=[PVC], volumeMounts=[{**PVC_MOUNT, "subPath": "../../etc"}]),
        "volumeMounts",
        "'..'",
        "cel",
    ),
    Hostile(
        "mount-sub-path-expr-absolute",
        _with(volumes=[PVC], volumeMounts=[{**PVC_MOUNT, "subPathExpr": "/$(POD_NAME)"}]),
        "volumeMounts",
        "'..'",
        "cel",
    ),
    Hostile(
        "host-path-root",
        _with(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
        "volumes",
        "hostPath",
        "schema",
    ),
    Hostile(
        "host-path-beside-a-pvc",
        _with(volumes=[{**PVC, "hostPath": {"path": "/var/run"}}]),
        "volumes",
        "hostPath",
        "schema",
    ),
    Hostile(
        "projected-token",
        _with(volumes=[{"name": "token", "projected": {"sources": [TOKEN]}}]),
        "volumes",
        "projected",
        "schema",
    ),
    Hostile(
        "foreign-service-account-token",
        _with(
            serviceAccountName="cluster-admin",
            volumes=[{"name": "token", "projected": {"sources": [TOKEN]}}],
        ),
        "volumes",
        "projected",
        "schema",
    ),
    Hostile("host-network", _with(hostNetwork=True), "hostNetwork", "hostNetwork", "schema"),
    Hostile("host-pid", _with(hostPID=True), "hostPID", "hostPID", "schema"),
    Hostile("host-ipc", _with(hostIPC=True), "hostIPC", "hostIPC", "schema"),
    Hostile(
        "privileged",
        _with(securityContext={"privileged": True}),
        "securityContext",
        "securityContext",
        "schema",
    ),
    Hostile(
        "added-capabilities",
        _with(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
        "securityContext",
        "securityContext",
        "schema",
    ),
    Hostile(
        "run-as-root",
        _with(securityContext={"runAsUser": 0}),
        "securityContext",
        "securityContext",
        "schema",
    ),
    Hostile(
        "bidirectional-mount-propagation",
        _with(
            volumes=[PVC],
            volumeMounts=[{**PVC_MOUNT, "mountPropagation": "Bidirectional"}],
        ),
        "volumeMounts",
        "mountPropagation",
        "schema",
    ),
    Hostile(
        "toleration-unknown-operator",
        _with(tolerations=[{"key": "gpu", "operator": "Any"}]),
        "tolerations",
        "operator",
        "schema",
    ),
    Hostile(
        "toleration-of-every-taint",
        _with(tolerations=[{"operator": "Exists"}]),
        "tolerations",
        "every taint",
        "cel",
    ),
    Hostile(
        "control-plane-toleration",
        _with(tolerations=[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]),
        "tolerations",
        "control-plane",
        "cel",
    ),
    Hostile(
        "control-plane-node-selector",
        _with(nodeSelector={"node-role.kubernetes.io/control-plane": ""}),
        "nodeSelector",
        "control-plane",
        "cel",
    ),
    Hostile(
        "control-plane-node-affinity",
        _with(
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "node-role.kubernetes.io/control-plane",
                                        "operator": "Exists",
                                    }
                                ]
                            }
                        ]
                    }
                }
            }
        ),
        "affinity",
        "control-plane",
        "cel",
    ),
    Hostile(
        "system-priority-class",
        _with(priorityClassName="system-node-critical"),
        "priorityClassName",
        "system-",
        "cel",
    ),
    Hostile(
        # What an API server that prunes unknown fields leaves of a hostPath volume.
        "volume-without-a-source",
        _with(volumes=[{"name": "root"}]),
        "volumes",
        "exactly one source",
        "cel",
    ),
    Hostile(
        "volume-named-like-the-operators-tmp",
        _with(volumes=[{"name": "ckptbench-tmp", "emptyDir": {}}]),
        "volumes",
        "ckptbench-tmp",
        "cel",
    ),
    Hostile(
        "mount-over-tmp",
        _with(volumes=[EMPTY_DIR], volumeMounts=[{"name": "scratch", "mountPath": "/tmp"}]),
        "volumeMounts",
        "/tmp",
        "cel",
    ),
]


def _benchmark(spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": spec_names.API_VERSION,
        "kind": spec_names.KIND,
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": spec,
    }


def _names(message: str, field: str) -> bool:
    return field in message


def _api_server_refuses(spec: Any, field: str, by: str, detail: str = "") -> None:
    """The CRD schema (by "schema") or only a CEL rule (by "cel") refuses ``spec``, in a message
    naming ``field`` and holding ``detail``."""
    obj = _benchmark(spec)
    errors = schema_errors(obj)
    if by == "schema":
        assert errors, "the CRD schema accepts it"
        named = [e for e in errors if _names(e, field) and detail in e]
        assert named, errors
    else:
        assert errors == [], "expected only a CEL rule to catch this"
        failures = cel_failures(obj)
        assert failures, "no CEL rule rejects it"
        named = [f for f in failures if f.startswith(f"spec.{field}: {field}")]
        assert any(detail in f for f in named), failures


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_api_server_rejects_naming_the_field(case: Case) -> None:
    _api_server_refuses(case.spec, case.field, case.by)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_operator_model_rejects_naming_the_field(case: Case) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(case.spec)
    problems = caught.value.problems
    prefix = "spec" if case.field == "spec" else f"spec.{case.field}"
    assert any(problem.startswith(prefix) for problem in problems), problems
    assert str(caught.value) == "; ".join(problems)


@pytest.mark.parametrize("case", HOSTILE, ids=[case.id for case in HOSTILE])
def test_api_server_refuses_hostile_specs_naming_the_field(case: Hostile) -> None:
    _api_server_refuses(case.spec, case.field, case.by, case.detail)


@pytest.mark.parametrize("case", HOSTILE, ids=[case.id for case in HOSTILE])
def test_operator_model_refuses_hostile_specs_naming_the_field(case: Hostile) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(case.spec)
    problems = caught.value.problems
    named = [p for p in problems if p.startswith(f"spec.{case.field}") and case.detail in p]
    assert named, problems


def test_at_least_twelve_hostile_specs() -> None:
    assert len(HOSTILE) >= 12
    assert len({case.id for case in HOSTILE}) == len(HOSTILE)


def test_at_least_fifteen_invalid_specs() -> None:
    assert len(CASES) >= 15
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("source", ["configMap", "secret"])
@pytest.mark.parametrize("path", ["../../x", "a/../../x", "/etc/x"])
def test_a_projected_file_outside_its_volume_is_refused_by_the_operator(
    source: str, path: str
) -> None:
    # The CRD keeps these sources free-form, so the API server passes them; the operator does not.
    key = "name" if source == "configMap" else "secretName"
    volume = {
        "name": "conf",
        source: {key: "c", "items": [{"key": "k", "path": "ok"}, {"key": "k", "path": path}]},
    }
    with pytest.raises(SpecError) as caught:
        parse_spec(_with(volumes=[volume]))
    assert f"spec.volumes[0].{source}.items[1].path: must be a relative path without '..'" in (
        str(caught.value)
    )


def test_every_cel_rule_is_exercised_by_a_case() -> None:
    broken = set()
    cases: list[Case | Hostile] = [*CASES, *HOSTILE]
    for case in cases:
        if case.by == "cel":
            broken |= {failure.split(": ", 1)[1] for failure in cel_failures(_benchmark(case.spec))}
    assert broken >= {rule.message for rule in RULES}


@pytest.mark.parametrize(
    "garbage",
    [None, 42, 3.5, True, "x", [], [1, 2], {"": None}, {"checkpointPath": None}, {1: 2}],
    ids=repr,
)
def test_garbage_never_crashes(garbage: Any) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(garbage)
    assert all(problem.startswith("spec") for problem in caught.value.problems)


@pytest.mark.parametrize("path", ["/data/..ckpt/x", "/data/ckpt..", "/data/./ckpt", "/data//ckpt"])
def test_a_file_path_under_its_mount_without_a_backstep_is_accepted(path: str) -> None:
    """Only a '..' segment is refused: a name with dots in it, '.' and '//' stay under /data."""
    spec = _with(backend="file", checkpointPath=path, volumes=[PVC], volumeMounts=[PVC_MOUNT])
    assert cel_failures(_benchmark(spec)) == []
    assert parse_spec(spec).checkpoint_path == path
