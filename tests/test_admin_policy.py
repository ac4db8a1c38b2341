"""The admin's allow-lists (images, service accounts, Secrets), at two of their three layers: the
spec model validated with the operator's policy, and the chart's ValidatingAdmissionPolicy, its
CEL evaluated by cel-python on the policy `helm template` renders. The third layer, the operator
refusing before it creates anything, runs on kmock in tests/test_operator_kmock.py.

The three escalations a user who may only create CheckpointBenchmarks tried (a foreign image, a
foreign service account, a Secret volume) are each refused by field at both layers; a spec naming
an allowed image, account and Secret is accepted by both; and the two agree over a table.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from ckptbench.operator.render.jobset import RenderDefaults, RenderError, render_jobset
from ckptbench.operator.spec.names import CHART_WORKLOAD_IMAGE, CHART_WORKLOAD_SERVICE_ACCOUNT
from ckptbench.operator.spec.parse import SpecError, parse_spec
from ckptbench.operator.spec.policy import Policy
from tests.tools import find_tool

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "ckptbench"
DIGEST = "sha256:" + "ab" * 32
PREFIX = "registry.example/team/"
ACCOUNT = "ckpt-writer"
SECRET = "bench-key"
# The chart's values for the admin of these tests, and the operator's policy from the same lists.
VALUES = [
    f"workload.allowedImagePrefixes={{{PREFIX}}}",
    f"workload.allowedServiceAccountNames={{{ACCOUNT}}}",
    f"workload.allowedSecretNames={{{SECRET}}}",
]
POLICY = Policy(
    image=CHART_WORKLOAD_IMAGE,
    image_prefixes=frozenset({PREFIX}),
    service_accounts=frozenset({CHART_WORKLOAD_SERVICE_ACCOUNT, ACCOUNT}),
    secrets=frozenset({SECRET}),
)
ADMISSION_APIS = (
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding",
)
BASE: dict[str, Any] = {"worldSize": 2, "checkpointPath": "gs://bucket/x"}

# What the escalation tried, and the field each refusal must name.
ESCALATIONS: dict[str, tuple[dict[str, Any], str]] = {
    "foreign-image": ({"image": "attacker.example/own:1"}, "spec.image"),
    "foreign-service-account": (
        {"serviceAccountName": "privileged-ksa"},
        "spec.serviceAccountName",
    ),
    "secret-volume": (
        {"volumes": [{"name": "pw", "secret": {"secretName": "prod-db-password"}}]},
        "spec.volumes",
    ),
    "s3-credentials-secret": (
        {
            "backend": "s3",
            "checkpointPath": "s3://bucket/x",
            "s3CredentialsSecret": "prod-db-password",
        },
        "spec.s3CredentialsSecret",
    ),
}
ALLOWED: dict[str, Any] = {
    "image": f"{PREFIX}ckptbench-workload:2",
    "serviceAccountName": ACCOUNT,
    "volumes": [{"name": "key", "secret": {"secretName": SECRET}}],
}


# ---- the model ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(ESCALATIONS))
def test_the_model_refuses_each_escalation_by_field_naming_the_allow_list(case: str) -> None:
    fields, field = ESCALATIONS[case]
    with pytest.raises(SpecError) as caught:
        parse_spec({**BASE, **fields}, POLICY)
    message = str(caught.value)
    assert message.startswith(f"{field}"), message
    assert "is not allowed by the operator's policy (allowed: " in message
    allowed = {"spec.image": PREFIX, "spec.serviceAccountName": ACCOUNT}
    assert allowed.get(field, SECRET) in message, message
    # Without the deployment's policy the model checks the shape only (a recorded spec).
    assert parse_spec({**BASE, **fields})


def test_the_model_accepts_an_allowed_image_account_and_secret() -> None:
    spec = parse_spec({**BASE, **ALLOWED}, POLICY)
    assert spec.image == ALLOWED["image"] and spec.service_account_name == ACCOUNT


def test_the_model_names_every_refused_field_at_once() -> None:
    raw = {**BASE, **{k: v for fields, _ in ESCALATIONS.values() for k, v in fields.items()}}
    with pytest.raises(SpecError) as caught:
        parse_spec(raw, POLICY)
    problems = str(caught.value).split("; spec.")
    assert len(problems) == len(ESCALATIONS), problems


def test_the_default_policy_allows_the_chart_image_and_its_digest_only() -> None:
    closed = Policy(image=CHART_WORKLOAD_IMAGE)
    assert closed.allows_image(CHART_WORKLOAD_IMAGE)
    assert closed.allows_image(f"ckptbench-workload@{DIGEST}")
    assert closed.allows_image(f"{CHART_WORKLOAD_IMAGE}@{DIGEST}")
    assert not closed.allows_image("ckptbench-workload:latest")
    assert not Policy().problems(parse_spec(BASE)), "a spec naming nothing needs nothing allowed"
    for fields, _ in ESCALATIONS.values():
        assert Policy(image=CHART_WORKLOAD_IMAGE).problems(parse_spec({**BASE, **fields}))


def test_render_refuses_what_the_policy_refuses_before_making_anything() -> None:
    # The operator's last check, right before it would create the JobSet: a spec that came by
    # another way than parse_spec with the policy is still refused.
    defaults = RenderDefaults(image=CHART_WORKLOAD_IMAGE, policy=POLICY)
    for fields, field in ESCALATIONS.values():
        spec = parse_spec({**BASE, **fields})
        with pytest.raises(RenderError, match=re.escape(field)):
            render_jobset("b", "ns", "uid", spec, defaults)
    assert render_jobset("b", "ns", "uid", parse_spec({**BASE, **ALLOWED}), defaults)


def test_an_image_prefix_must_end_in_a_slash() -> None:
    # "registry.example" would admit registry.example.attacker.io/x.
    with pytest.raises(ValueError, match="ending in '/'"):
        Policy(image_prefixes=frozenset({"registry.example"}))


# ---- the chart's ValidatingAdmissionPolicy --------------------------------------------------


def _helm_template(
    *sets: str, apis: tuple[str, ...] = ADMISSION_APIS
) -> subprocess.CompletedProcess[str]:
    helm = find_tool(
        "helm",
        "helm not found in .tools/bin or PATH: run scripts/install-helm.sh",
        ROOT / ".tools" / "bin" / "helm",
    )
    args = [helm, "template", "bench", str(CHART), "--namespace", "ckptbench-system"]
    for item in sets:
        args += ["--set", item]
    for api in apis:  # by default a cluster that serves them (Kubernetes 1.30+)
        args += ["--api-versions", api]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


@functools.cache
def rendered_policy(*sets: str) -> dict[str, Any]:
    result = _helm_template(*sets)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    (policy,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    return dict(policy)


def _evaluate(expression: str, activation: dict[str, Any]) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression)).evaluate(activation)


def admission_refusals(
    policy: dict[str, Any], spec: dict[str, Any], kind: str = "CheckpointBenchmark"
) -> list[str]:
    """The messages the API server would answer a CREATE of a ``kind`` with ``spec``."""
    meta = {"name": "b", "namespace": "ns"}
    obj = json_to_cel({"apiVersion": "ckptbench.dev/v1alpha1", "kind": kind, "metadata": meta,
                       "spec": spec})  # fmt: skip
    request = json_to_cel({"operation": "CREATE"})
    activation: dict[str, Any] = {"object": obj, "oldObject": None, "request": request}
    for condition in policy["spec"]["matchConditions"]:
        if not _evaluate(condition["expression"], activation):
            return []
    # In order: a variable may read the object and the variables before it.
    variables = celpy.celtypes.MapType({})
    activation["variables"] = variables
    for variable in policy["spec"]["variables"]:
        value = _evaluate(variable["expression"], activation)
        variables[celpy.celtypes.StringType(variable["name"])] = value
    refused = []
    for validation in policy["spec"]["validations"]:
        try:
            ok = _evaluate(validation["expression"], activation)
        except CELEvalError as exc:  # failurePolicy Fail: an error refuses too
            ok = exc
        if isinstance(ok, Exception) or not bool(ok):
            refused.append(validation["message"])
    return refused


@pytest.mark.parametrize("case", list(ESCALATIONS))
def test_the_admission_policy_refuses_each_escalation_by_field(case: str) -> None:
    fields, field = ESCALATIONS[case]
    (message,) = admission_refusals(rendered_policy(*VALUES), {**BASE, **fields})
    assert message.startswith(field), message
    allowed = {"spec.image": PREFIX, "spec.serviceAccountName": ACCOUNT}
    assert "(allowed: " in message and allowed.get(field, SECRET) in message, message


def test_the_admission_policy_accepts_an_allowed_image_account_and_secret() -> None:
    assert admission_refusals(rendered_policy(*VALUES), {**BASE, **ALLOWED}) == []
    assert admission_refusals(rendered_policy(*VALUES), BASE) == []


def test_the_default_admission_policy_allows_only_the_chart_image_and_account() -> None:
    policy = rendered_policy()
    assert admission_refusals(policy, {**BASE, "image": CHART_WORKLOAD_IMAGE}) == []
    assert admission_refusals(policy, {**BASE, "image": f"ckptbench-workload@{DIGEST}"}) == []
    sa = {"serviceAccountName": CHART_WORKLOAD_SERVICE_ACCOUNT}
    assert admission_refusals(policy, {**BASE, **sa}) == []
    for fields, _ in ESCALATIONS.values():
        assert admission_refusals(policy, {**BASE, **fields})
    assert admission_refusals(policy, {**BASE, **ALLOWED})


def test_an_update_that_leaves_the_spec_alone_is_not_checked() -> None:
    # The operator patches its own annotations on benchmarks an older policy admitted.
    policy = rendered_policy()
    obj = json_to_cel({"spec": {**BASE, "image": "attacker.example/own:1"}})
    activation = {"object": obj, "oldObject": obj, "request": json_to_cel({"operation": "UPDATE"})}
    (condition,) = policy["spec"]["matchConditions"]
    assert not _evaluate(condition["expression"], activation)


# The CEL and the Python twin agree, image by image, secret by secret.
IMAGES = [
    CHART_WORKLOAD_IMAGE,
    f"ckptbench-workload@{DIGEST}",
    f"{CHART_WORKLOAD_IMAGE}@{DIGEST}",
    f"ckptbench-workload@{DIGEST}0",  # a digest one character too long
    f"ckptbench-workload@sha256:{'AB' * 32}",  # not lowercase hex
    "ckptbench-workload:latest",
    f"ckptbench-workload:5000/evil@{DIGEST}",  # another registry whose host is the repository
    f"ckptbench-workloadx@{DIGEST}",
    f"ckptbench-workload@sha256:{'0' * 64}/x@{DIGEST}",  # two digests, something between
    f"{PREFIX}ckptbench-workload:2",
    f"{PREFIX}nested/path/img@{DIGEST}",
    f"{PREFIX}../other/img:1",
    f"{PREFIX}/img:1",
    "registry.example/team-evil/img:1",
    "registry.example.attacker.io/team/img:1",
    "attacker.example/own:1",
]
VOLUMES = [
    [{"name": "k", "secret": {"secretName": SECRET}}],
    [{"name": "k", "secret": {"secretName": "prod-db-password"}}],
    [{"name": "k", "secret": {}}],
    [{"name": "k", "secret": {"secretName": {"name": SECRET}}}],  # not a string
    [{"name": "k", "secret": {"secretName": 7}}],
    [{"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": SECRET}}}],
    [{"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "other"}}}],
    [{"name": "c", "csi": {"driver": "d"}}],
    [{"name": "s", "emptyDir": {}}, {"name": "k", "secret": {"secretName": "other"}}],
]


@pytest.mark.parametrize(
    "fields",
    [{"image": i} for i in IMAGES]
    + [{"volumes": v} for v in VOLUMES]
    + [{"serviceAccountName": a} for a in (ACCOUNT, CHART_WORKLOAD_SERVICE_ACCOUNT, "default")]
    + [
        {"backend": "s3", "checkpointPath": "s3://bucket/x", "s3CredentialsSecret": name}
        for name in (SECRET, "prod-db-password")
    ],
)
def test_the_admission_policy_and_the_model_agree(fields: dict[str, Any]) -> None:
    spec = {**BASE, **fields}
    by_cel = bool(admission_refusals(rendered_policy(*VALUES), spec))
    by_model = bool(POLICY.problems(parse_spec(spec)))
    assert by_cel == by_model, f"CEL refuses: {by_cel}, the model refuses: {by_model}"


# ---- sweeps: the template is checked before any child exists ---------------------------------


class _SweepApi:
    def __init__(self, template: dict[str, Any]) -> None:
        self.sweep = {
            "metadata": {"name": "s", "namespace": "ns", "uid": "u"},
            "spec": {"template": template, "axes": {"threads": [4, 8]}},
        }
        self.created: list[dict[str, Any]] = []
        self.status: dict[str, Any] = {}

    def get_sweep(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.sweep

    def list_sweep_children(self, namespace: str, sweep: str) -> list[dict[str, Any]]:
        return []

    def create_benchmark(self, namespace: str, body: Any) -> dict[str, Any] | None:
        self.created.append(dict(body))
        return dict(body)

    def delete_benchmark(self, namespace: str, name: str) -> None:
        raise AssertionError("nothing to delete")

    def patch_sweep_status(self, namespace: str, name: str, patch: Any) -> None:
        self.status.update(patch)


@pytest.mark.parametrize("case", list(ESCALATIONS))
def test_a_sweep_whose_template_the_policy_refuses_creates_no_child(case: str) -> None:
    from ckptbench.operator.runtime.sweeps import reconcile_sweep_once

    fields, field = ESCALATIONS[case]
    api = _SweepApi({**BASE, **fields})
    reconcile_sweep_once(api, "ns", "s", POLICY)
    assert api.created == []
    assert api.status["reason"] == "InvalidSpec"
    assert field.replace("spec.", "spec.template.") in api.status["message"]
    (failed,) = [c for c in api.status["conditions"] if c["type"] == "Failed"]
    assert (failed["status"], failed["reason"]) == ("True", "InvalidSpec")
    allowed = _SweepApi({**BASE, **ALLOWED})
    reconcile_sweep_once(allowed, "ns", "s", POLICY)
    assert allowed.created, "the allowed template starts its first cell"


# ---- from chart values to the operator's flags -----------------------------------------------


def test_the_chart_passes_the_allow_lists_to_the_operator() -> None:
    from ckptbench.operator.runtime.main import parse_args

    result = _helm_template(*VALUES)
    assert result.returncode == 0, result.stderr
    (deployment,) = [
        d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Deployment"
    ]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    options = parse_args(args, environ={})
    assert options.admin_policy() == POLICY


def test_the_default_chart_allows_the_workload_image_and_account_only() -> None:
    from ckptbench.operator.runtime.main import parse_args

    result = _helm_template()
    (deployment,) = [
        d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Deployment"
    ]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert parse_args(args, environ={}).admin_policy() == Policy(
        image=CHART_WORKLOAD_IMAGE, service_accounts=frozenset({CHART_WORKLOAD_SERVICE_ACCOUNT})
    )
    assert _helm_template("admissionPolicy.enabled=false").returncode != 0  # not top-level
    off = _helm_template("workload.admissionPolicy.enabled=false")
    kinds = {d["kind"] for d in yaml.safe_load_all(off.stdout) if d}
    assert "ValidatingAdmissionPolicy" not in kinds and "Deployment" in kinds
    # A cluster before 1.30 serves no ValidatingAdmissionPolicy: the install goes through
    # without it (NOTES.txt says so; tests/test_chart.py), the operator still enforces the lists.
    older = _helm_template(apis=())
    kinds = {d["kind"] for d in yaml.safe_load_all(older.stdout) if d}
    assert "ValidatingAdmissionPolicy" not in kinds and "Deployment" in kinds


@pytest.mark.parametrize(
    "setting",
    [
        "workload.allowedImagePrefixes={registry.example}",  # no trailing '/'
        "workload.allowedImagePrefixes={registry.example/team}",
        "workload.allowedServiceAccountNames={Not_A_Name}",
        "workload.allowedSecretNames={../x}",
    ],
)
def test_the_values_schema_refuses_a_bad_allow_list_entry(setting: str) -> None:
    result = _helm_template(setting)
    assert result.returncode != 0, f"--set {setting} was accepted"
    assert "values don't meet the specifications of the schema" in result.stderr


def test_the_operator_refuses_a_prefix_without_a_slash_naming_the_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ckptbench.operator.runtime.main import parse_args

    with pytest.raises(SystemExit) as exited:
        parse_args(["--allow-image-prefix", "registry.example"], environ={})
    assert exited.value.code == 2
    assert "--allow-image-prefix" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("envFrom", [{"secretRef": {"name": "prod-db-password"}}]),
        (
            "env",
            [
                {
                    "name": "P",
                    "valueFrom": {"secretKeyRef": {"name": "prod-db-password", "key": "k"}},
                }
            ],
        ),
    ],
)
def test_a_secret_cannot_come_in_through_the_environment(field: str, value: Any) -> None:
    # The spec has no env or envFrom: the model and the CRD refuse them as unknown fields.
    from tests.crd_validation import schema_errors

    with pytest.raises(SpecError, match=rf"spec\.{field}: Extra inputs are not permitted"):
        parse_spec({**BASE, field: value})
    errors = schema_errors({"apiVersion": "ckptbench.dev/v1alpha1", "kind": "CheckpointBenchmark",
                            "metadata": {"name": "b"}, "spec": {**BASE, field: value}})  # fmt: skip
    assert any(field in e for e in errors), errors


@pytest.mark.parametrize("case", list(ESCALATIONS))
def test_the_admission_policy_refuses_a_sweep_whose_template_escalates(case: str) -> None:
    fields, field = ESCALATIONS[case]
    policy = rendered_policy(*VALUES)
    sweep = {"template": {**BASE, **fields}, "axes": {"threads": [4, 8]}}
    (message,) = admission_refusals(policy, sweep, "CheckpointBenchmarkSweep")
    assert message.startswith(field) and "in a sweep, under spec.template" in message, message
    allowed = {"template": {**BASE, **ALLOWED}, "axes": {"threads": [4, 8]}}
    assert admission_refusals(policy, allowed, "CheckpointBenchmarkSweep") == []
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert {"checkpointbenchmarks", "checkpointbenchmarksweeps"} <= set(rules[0]["resources"])


DATA_BASE: dict[str, Any] = {"worldSize": 2, "dataPath": "gs://bucket/data"}


@pytest.mark.parametrize("case", list(ESCALATIONS))
def test_the_admission_policy_refuses_a_data_loading_benchmark_that_escalates(case: str) -> None:
    fields, field = ESCALATIONS[case]
    fields = {k: v for k, v in fields.items() if k != "checkpointPath"}
    if "backend" in fields:
        fields["dataPath"] = "s3://bucket/data"
    policy = rendered_policy(*VALUES)
    (message,) = admission_refusals(policy, {**DATA_BASE, **fields}, "DataLoadingBenchmark")
    assert message.startswith(field), message
    assert admission_refusals(policy, {**DATA_BASE, **ALLOWED}, "DataLoadingBenchmark") == []
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert "dataloadingbenchmarks" in rules[0]["resources"]
    # A DataLoadingBenchmarkSweep's template is checked as the benchmark's spec.
    sweep = {"template": {**DATA_BASE, **fields}, "axes": {"numWorkers": [1, 2]}}
    (message,) = admission_refusals(policy, sweep, "DataLoadingBenchmarkSweep")
    assert message.startswith(field) and "in a sweep, under spec.template" in message, message
    allowed = {"template": {**DATA_BASE, **ALLOWED}, "axes": {"numWorkers": [1, 2]}}
    assert admission_refusals(policy, allowed, "DataLoadingBenchmarkSweep") == []
    assert "dataloadingbenchmarksweeps" in rules[0]["resources"]


def test_the_admission_policy_template_matches_every_benchmark_kind() -> None:
    # Read without helm: the resources the policy is bound to name every kind's plural.
    from ckptbench.operator.data.names import PLURAL as DATA_PLURAL
    from ckptbench.operator.spec.names import PLURAL

    text = (CHART / "templates" / "admission-policy.yaml").read_text()
    (line,) = [line for line in text.splitlines() if line.strip().startswith("resources:")]
    sweeps = [f"{p.removesuffix('s')}sweeps" for p in (PLURAL, DATA_PLURAL)]
    for plural in (PLURAL, DATA_PLURAL, *sweeps):
        assert f'"{plural}"' in line, line
