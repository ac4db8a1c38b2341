"""The Helm chart with a real helm binary: lint, render, schema-validate, refuse bad values.

helm comes from scripts/install-helm.sh (.tools/bin/helm) or PATH. Without it these tests skip
on a developer's machine and fail in CI (CI=true), so a broken install cannot pass silently.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s_schemas import validate
from tests.tools import find_tool

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "ckptbench"
DASHBOARD = CHART / "dashboards" / "ckptbench.json"
CRD_FILE = "checkpointbenchmarks.ckptbench.dev.yaml"
RELEASE, NAMESPACE = "bench", "ckptbench-system"

# Value sets rendered once per module. Each optional part on, alone and together, both watch modes.
VALUE_SETS: dict[str, list[str]] = {
    "default": [],
    "service-monitor": ["serviceMonitor.enabled=true"],
    "dashboard": ["dashboard.enabled=true"],
    "kueue": ["kueue.enabled=true"],
    "workload-sa": ["workloadServiceAccount.create=true"],
    "namespaces": ["watch.namespaces={team-a,team-b}", "kueue.enabled=true"],
    "cluster-wide": ["watch.allNamespaces=true", "kueue.enabled=true"],
    "everything": [
        "serviceMonitor.enabled=true",
        "dashboard.enabled=true",
        "kueue.enabled=true",
        "workloadServiceAccount.create=true",
        "watch.namespaces={team-a,team-b}",
        "metrics.port=9090",
        "health.port=9091",
    ],
}

# The operator contract (notes/operator-contract.md): what the operator calls, nothing more.
NAMESPACED_RULES = {
    ("ckptbench.dev", "checkpointbenchmarks", verb)
    for verb in ("get", "list", "watch", "patch", "update", "create", "delete")
} | {
    *{("ckptbench.dev", "checkpointbenchmarks/status", v) for v in ("get", "patch", "update")},
    *{
        ("ckptbench.dev", "checkpointbenchmarksweeps", v)
        for v in ("get", "list", "watch", "patch", "update")
    },
    *{("ckptbench.dev", "checkpointbenchmarksweeps/status", v) for v in ("get", "patch", "update")},
    *{
        ("ckptbench.dev", "dataloadingbenchmarks", v)
        for v in ("get", "list", "watch", "patch", "update", "create", "delete")
    },
    *{("ckptbench.dev", "dataloadingbenchmarks/status", v) for v in ("get", "patch", "update")},
    *{
        ("ckptbench.dev", "dataloadingbenchmarksweeps", v)
        for v in ("get", "list", "watch", "patch", "update")
    },
    *{
        ("ckptbench.dev", "dataloadingbenchmarksweeps/status", v)
        for v in ("get", "patch", "update")
    },
    *{("jobset.x-k8s.io", "jobsets", v) for v in ("get", "list", "watch", "create")},
    *{("", "pods", v) for v in ("get", "list", "watch")},
    *{("", "events", v) for v in ("create", "patch")},
    *{("events.k8s.io", "events", v) for v in ("create", "patch")},
}
# kopf's peering object of the replicas: a KopfPeering per watched namespace, or the cluster's.
PEERING_RULES = {("kopf.dev", "kopfpeerings", v) for v in ("get", "list", "watch", "patch")}
CLUSTER_PEERING_RULES = {
    ("kopf.dev", "clusterkopfpeerings", v) for v in ("get", "list", "watch", "patch")
}
CLUSTER_ONLY_RULES = {
    ("", "namespaces", "list"),
    ("", "namespaces", "watch"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
}

# The contract's metrics: each must have a panel. The names the dashboard may use come from the
# operator's registry (ckptbench.operator.runtime.metrics.metric_names), this list only stands in
# for it while that module does not exist.
CONTRACT_METRICS = {
    "ckptbench_benchmark_checkpoint_bytes": "gauge",
    "ckptbench_benchmark_ranks": "gauge",
    "ckptbench_benchmark_phase": "gauge",
    "ckptbench_benchmark_duration_seconds": "gauge",
    "ckptbench_benchmark_throughput_bytes_per_second": "gauge",
    "ckptbench_benchmark_operation_part_seconds": "gauge",
    "ckptbench_operator_reconciles_total": "counter",
    "ckptbench_operator_reconcile_errors_total": "counter",
    "ckptbench_operator_reconcile_duration_seconds": "histogram",
    # A DataLoadingBenchmark's (the dashboard's "Data loading" row).
    "ckptbench_data_ranks": "gauge",
    "ckptbench_data_phase": "gauge",
    "ckptbench_data_samples_per_second": "gauge",
    "ckptbench_data_bytes_per_second": "gauge",
    "ckptbench_data_accelerator_utilization_ratio": "gauge",
    "ckptbench_data_au_passed": "gauge",
    "ckptbench_data_time_to_first_batch_seconds": "gauge",
    "ckptbench_data_batch_wait_seconds": "gauge",
    "ckptbench_data_sustained_accelerators": "gauge",
    "ckptbench_data_epochs": "gauge",
    # A CheckpointBenchmark's both demands at once (the "Both demands at once" row).
    "ckptbench_both_slowdown_ratio": "gauge",
    "ckptbench_both_samples_per_second": "gauge",
    "ckptbench_both_accelerator_utilization_ratio": "gauge",
    "ckptbench_both_seconds": "gauge",
}


def find_helm() -> str:
    return find_tool(
        "helm",
        "helm not found in .tools/bin or PATH: run scripts/install-helm.sh",
        ROOT / ".tools" / "bin" / "helm",
    )


@pytest.fixture(scope="module")
def helm() -> str:
    return find_helm()


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, *args], capture_output=True, text=True, timeout=60, check=False, cwd=ROOT
    )


# The optional APIs the chart creates objects of only when the cluster serves them
# (.Capabilities guards). `helm template` knows of none unless told: the tests render for a
# cluster that has them all, except where they test the guards.
OPTIONAL_APIS = (
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
    "kueue.x-k8s.io/v1beta2/ResourceFlavor",
    "kueue.x-k8s.io/v1beta2/ClusterQueue",
    "kueue.x-k8s.io/v1beta2/LocalQueue",
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding",
)


def template_args(sets: list[str], apis: tuple[str, ...] = OPTIONAL_APIS) -> list[str]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for item in sets:
        args += ["--set", item]
    for api in apis:
        args += ["--api-versions", api]
    return args


@pytest.fixture(scope="module")
def render(helm: str) -> Iterator[Any]:
    """render(name) -> the objects `helm template` prints for VALUE_SETS[name], cached."""

    @functools.cache
    def _render(name: str) -> tuple[dict[str, Any], ...]:
        result = run_helm(helm, *template_args(VALUE_SETS[name]))
        assert result.returncode == 0, f"helm template ({name}) failed:\n{result.stderr}"
        return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)

    yield _render


def aggregated(obj: dict[str, Any]) -> bool:
    """A ClusterRole for people (aggregated to edit/view), not one the operator runs with."""
    labels = obj["metadata"].get("labels") or {}
    return any(k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in labels)


def of_kind(objects: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and not aggregated(o)]


def operator_container(objects: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    (deployment,) = of_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


# ---- lint and schema validation -------------------------------------------------------------


@pytest.mark.parametrize("name", ["default", "everything", "cluster-wide"])
def test_helm_lint_strict_passes_without_warnings(helm: str, name: str) -> None:
    args = ["lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    for item in VALUE_SETS[name]:
        args += ["--set", item]
    result = run_helm(helm, *args)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "0 chart(s) failed" in output
    assert "[WARNING]" not in output and "[ERROR]" not in output, output


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_rendered_object_validates_against_its_schema(render: Any, name: str) -> None:
    objects = render(name)
    assert objects, f"{name}: nothing rendered"
    for obj in objects:
        validate(obj)


EXPECTED_KINDS = {
    "default": {
        *("ServiceAccount", "Role", "RoleBinding", "Service", "Deployment"),
        *("KopfPeering", "PodDisruptionBudget"),
    },
    "service-monitor": {"ServiceMonitor"},
    "dashboard": {"ConfigMap"},
    "kueue": {"ResourceFlavor", "ClusterQueue", "LocalQueue"},
    "cluster-wide": {"ClusterRole", "ClusterRoleBinding", "LocalQueue", "ClusterKopfPeering"},
}


@pytest.mark.parametrize("name", list(EXPECTED_KINDS))
def test_each_optional_part_renders_its_objects(render: Any, name: str) -> None:
    kinds = {o["kind"] for o in render(name)}
    assert EXPECTED_KINDS[name] <= kinds


GUARDED = {
    "serviceMonitor": ("ServiceMonitor", ("monitoring.coreos.com/v1/ServiceMonitor",)),
    "prometheusRule": ("PrometheusRule", ("monitoring.coreos.com/v1/PrometheusRule",)),
    "kueue": (
        "ClusterQueue",
        tuple(a for a in OPTIONAL_APIS if a.startswith("kueue.x-k8s.io/")),
    ),
}


def kinds_rendered(helm: str, sets: list[str], apis: tuple[str, ...]) -> set[str]:
    result = run_helm(helm, *template_args(sets, apis))
    assert result.returncode == 0, result.stderr
    return {d["kind"] for d in yaml.safe_load_all(result.stdout) if d}


@pytest.mark.parametrize("part", list(GUARDED))
def test_optional_objects_only_where_the_cluster_serves_their_api(helm: str, part: str) -> None:
    """With auto, a ServiceMonitor, PrometheusRule or Kueue queue on a cluster without that CRD
    (which would fail the whole install at apply time) is left out: each is created only when
    the API is served."""
    kind, apis = GUARDED[part]
    sets = [f"{part}.enabled=auto"]
    assert kind in kinds_rendered(helm, sets, apis)
    assert kind not in kinds_rendered(helm, sets, ())
    # Another optional API does not stand in for this one.
    others = tuple(a for a in OPTIONAL_APIS if a not in apis)
    assert kind not in kinds_rendered(helm, sets, others)


# Each optional object's `enabled` value, and its kind, the API that guards it under auto.
TRI_STATE = {
    **{part: (kind, apis) for part, (kind, apis) in GUARDED.items()},
    "workload.admissionPolicy": (
        "ValidatingAdmissionPolicy",
        tuple(a for a in OPTIONAL_APIS if a.startswith("admissionregistration.k8s.io/")),
    ),
}


@pytest.mark.parametrize("part", list(TRI_STATE))
def test_true_renders_whatever_the_cluster_serves_and_false_never(helm: str, part: str) -> None:
    """A GitOps pipeline runs a plain `helm template`, which knows none of the cluster's APIs:
    true must render the object all the same (not drop it in silence), false never."""
    kind, apis = TRI_STATE[part]
    assert kind in kinds_rendered(helm, [f"{part}.enabled=true"], ())
    assert kind not in kinds_rendered(helm, [f"{part}.enabled=false"], OPTIONAL_APIS)
    assert kind in kinds_rendered(helm, [f"{part}.enabled=auto"], apis)
    assert kind not in kinds_rendered(helm, [f"{part}.enabled=auto"], ())


@pytest.mark.parametrize("part", list(TRI_STATE))
@pytest.mark.parametrize("value", ["yes", "on", "always", "1"])
def test_the_schema_takes_only_auto_true_or_false(helm: str, part: str, value: str) -> None:
    result = run_helm(helm, *template_args([f"{part}.enabled={value}"]))
    assert result.returncode != 0, f"{part}.enabled={value} was accepted"
    assert "/" + part.replace(".", "/") + "/enabled" in result.stderr, result.stderr


def install_notes(helm: str, sets: list[str]) -> str:
    """NOTES.txt as `helm install` prints it (client-side dry run: a cluster without the
    optional APIs)."""
    args = ["install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client"]
    for item in sets:
        args += ["--set", item]
    result = run_helm(helm, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("NOTES:", 1)[1]


def test_notes_say_which_enabled_parts_the_cluster_could_not_take(helm: str) -> None:
    parts = list(GUARDED)
    notes = install_notes(helm, [f"{part}.enabled=auto" for part in parts])
    for part in parts:
        assert f"NOTE: {part}.enabled is auto, but this cluster serves no" in notes, notes
    # The admission policy is on by default: a cluster before 1.30 is told the API server does
    # not check the allow-lists.
    notes = install_notes(helm, [])
    assert notes.count("NOTE:") == 1, notes
    assert "NOTE: workload.admissionPolicy.enabled is auto, but this cluster serves no" in notes
    assert "NOTE:" not in install_notes(helm, ["workload.admissionPolicy.enabled=false"])


def test_optional_parts_are_off_by_default(render: Any) -> None:
    objects = tuple(o for o in render("default") if not aggregated(o))
    kinds = {o["kind"] for o in objects}
    optional = {
        *("ServiceMonitor", "PrometheusRule", "ConfigMap"),
        *("ResourceFlavor", "ClusterQueue", "LocalQueue"),
    }
    assert not kinds & optional
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "NetworkPolicy"}


# ---- values.schema.json refuses bad values --------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("replicaCount=-1", "replicaCount"),
        ("image.pullPolicy=Sometimes", "image.pullPolicy"),
        ("workload.image.pullPolicy=Often", "workload.image.pullPolicy"),
        ("metrics.port=0", "metrics.port"),
        ("metrics.port=70000", "metrics.port"),
        ("health.port=70000", "health.port"),
        ("watch.namespaces={Not_A_Namespace}", "watch.namespaces"),
        ("kueue.clusterQueue.queueingStrategy=LIFO", "kueue.clusterQueue.queueingStrategy"),
        ("replicaCuont=1", "replicaCuont"),
        ("peering.lifetime=1", "peering.lifetime"),
        ("bindAddress=0.0.0.0;rm", "bindAddress"),  # the deployment's argument, unquoted
        ("bindAddress=0.0.0.0 --x", "bindAddress"),
    ],
)
def test_values_schema_refuses_bad_values(helm: str, setting: str, field: str) -> None:
    result = run_helm(helm, *template_args([setting]))
    assert result.returncode != 0, f"--set {setting} was accepted"
    message = result.stderr
    assert "values don't meet the specifications of the schema" in message, message
    # helm 4 (and 3.18+) print a JSON pointer (/metrics/port); older helm 3 a dotted path.
    pointer, dotted = "/" + field.replace(".", "/"), field
    assert pointer in message or dotted in message, f"{field} not named in:\n{message}"


# ---- CRD copy -------------------------------------------------------------------------------


def test_chart_crds_are_byte_identical_to_the_generated_crds() -> None:
    top, chart = ROOT / "crds", CHART / "crds"
    resync = (
        "charts/ckptbench/crds/ must equal crds/ (the CRD generated from the spec model). "
        "Resync with: .venv/bin/ckptbench crd > crds/" + CRD_FILE + " && "
        "cp crds/*.yaml charts/ckptbench/crds/"
    )
    top_files = sorted(p.name for p in top.glob("*.yaml"))
    assert CRD_FILE in top_files, f"crds/{CRD_FILE} is missing. {resync}"
    assert sorted(p.name for p in chart.glob("*.yaml")) == top_files, resync
    for name in top_files:
        assert (top / name).read_bytes() == (chart / name).read_bytes(), f"{name}: {resync}"


def test_chart_crd_is_a_valid_crd() -> None:
    crd = yaml.safe_load((CHART / "crds" / CRD_FILE).read_text())
    validate(crd)
    assert crd["spec"]["group"] == "ckptbench.dev"
    assert crd["spec"]["names"]["shortNames"] == ["ckb"]


# ---- RBAC -----------------------------------------------------------------------------------


def rule_triples(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    triples = set()
    for rule in rules:
        for key in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(key, []), f"wildcard in {key}: {rule}"
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    triples.add((group, resource, verb))
    return triples


def test_namespaced_rbac_grants_exactly_the_contract_in_each_watched_namespace(
    render: Any,
) -> None:
    objects = render("namespaces")
    assert not of_kind(objects, "ClusterRole") and not of_kind(objects, "ClusterRoleBinding")
    roles = {r["metadata"]["namespace"]: r for r in of_kind(objects, "Role")}
    bindings = {b["metadata"]["namespace"]: b for b in of_kind(objects, "RoleBinding")}
    assert set(roles) == set(bindings) == {"team-a", "team-b"}
    (account,) = of_kind(objects, "ServiceAccount")
    for namespace, role in roles.items():
        assert rule_triples(role["rules"]) == NAMESPACED_RULES | PEERING_RULES, namespace
        binding = bindings[namespace]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        }
        assert binding["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": account["metadata"]["name"],
                "namespace": NAMESPACE,
            }
        ]
    args = operator_container(objects)["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args
    assert "--all-namespaces" not in args


def test_default_watches_only_the_release_namespace(render: Any) -> None:
    objects = render("default")
    assert [r["metadata"]["namespace"] for r in of_kind(objects, "Role")] == [NAMESPACE]
    assert f"--namespace={NAMESPACE}" in operator_container(objects)["args"]


def test_cluster_wide_rbac_adds_only_kopf_scanning(render: Any) -> None:
    objects = render("cluster-wide")
    assert not of_kind(objects, "Role") and not of_kind(objects, "RoleBinding")
    (role,) = of_kind(objects, "ClusterRole")
    (binding,) = of_kind(objects, "ClusterRoleBinding")
    assert rule_triples(role["rules"]) == (
        NAMESPACED_RULES | CLUSTER_PEERING_RULES | CLUSTER_ONLY_RULES
    )
    assert binding["roleRef"]["kind"] == "ClusterRole"
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["namespace"] == NAMESPACE
    args = operator_container(objects)["args"]
    assert "--all-namespaces" in args
    assert not [a for a in args if a.startswith("--namespace")]


# ---- Deployment -----------------------------------------------------------------------------


def test_deployment_runs_restricted(render: Any) -> None:
    objects = render("default")
    (deployment,) = of_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = operator_container(objects)
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["runAsNonRoot"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    # A read-only root still needs a writable /tmp for Python's tempfile.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind]), kind
    (account,) = of_kind(objects, "ServiceAccount")
    assert pod["serviceAccountName"] == account["metadata"]["name"]


@pytest.mark.parametrize(
    ("name", "metrics", "health"), [("default", 8080, 8081), ("everything", 9090, 9091)]
)
def test_ports_probe_and_flags_follow_values(
    render: Any, name: str, metrics: int, health: int
) -> None:
    objects = render(name)
    container = operator_container(objects)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": metrics, "health": health}
    probe = container["livenessProbe"]["httpGet"]
    assert probe["path"] == "/healthz" and ports[probe["port"]] == health
    args = container["args"]
    assert f"--metrics-port={metrics}" in args and f"--health-port={health}" in args
    assert "--bind-address=0.0.0.0" in args
    assert "--default-image=ckptbench-workload:0.1.0" in args
    assert "--default-image-pull-policy=IfNotPresent" in args
    (service,) = of_kind(objects, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    (deployment,) = of_kind(objects, "Deployment")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_service_monitor_scrapes_the_metrics_service(render: Any) -> None:
    objects = render("service-monitor")
    (monitor,) = of_kind(objects, "ServiceMonitor")
    (service,) = of_kind(objects, "Service")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    # The benchmark's namespace label survives the Prometheus Operator's relabelling.
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def test_service_monitor_takes_relabelings(helm: str, tmp_path: Path) -> None:
    drop: dict[str, Any] = {
        "action": "drop",
        "sourceLabels": ["__name__"],
        "regex": "ckptbench_operator_reconcile_duration_seconds.*",
    }
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "serviceMonitor": {
                    "enabled": True,
                    "relabelings": [{"targetLabel": "team", "replacement": "storage"}],
                    "metricRelabelings": [drop],
                }
            }
        )
    )
    result = run_helm(helm, *template_args([]), "-f", str(values))
    assert result.returncode == 0, result.stderr
    (monitor,) = [
        d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "ServiceMonitor"
    ]
    validate(monitor)
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["relabelings"] == [{"targetLabel": "team", "replacement": "storage"}]
    assert endpoint["metricRelabelings"] == [drop]


def test_kueue_queues_cover_the_watched_namespaces(render: Any) -> None:
    objects = render("namespaces")
    (flavor,) = of_kind(objects, "ResourceFlavor")
    (queue,) = of_kind(objects, "ClusterQueue")
    locals_ = of_kind(objects, "LocalQueue")
    assert {q["metadata"]["namespace"] for q in locals_} == {"team-a", "team-b"}
    assert {q["spec"]["clusterQueue"] for q in locals_} == {queue["metadata"]["name"]}
    (group,) = queue["spec"]["resourceGroups"]
    assert group["flavors"][0]["name"] == flavor["metadata"]["name"]
    (expression,) = queue["spec"]["namespaceSelector"]["matchExpressions"]
    assert sorted(expression["values"]) == ["team-a", "team-b"]


# ---- Grafana dashboard ----------------------------------------------------------------------

PROMQL_WORDS = {
    # aggregations, functions and keywords the dashboard may use
    "sum", "min", "max", "avg", "count", "topk", "bottomk", "quantile", "stddev", "group",
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "rate", "irate", "increase", "delta", "histogram_quantile",
    "label_values", "max_over_time", "min_over_time", "avg_over_time", "last_over_time",
    "clamp_min", "clamp_max", "abs", "time", "vector", "scalar", "sort", "sort_desc",
}  # fmt: skip


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (labels, strings and keywords removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\$\{?\w+\}?", "", text)  # Grafana variables such as $__rate_interval
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    words = set(re.findall(r"(?<![\w.])[A-Za-z_:][\w:]*", text))
    return words - PROMQL_WORDS


def dashboard_expressions(dashboard: dict[str, Any]) -> list[str]:
    exprs: list[str] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            exprs.extend(t["expr"] for t in panel.get("targets", []))
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            query = query["query"] if isinstance(query, dict) else query
            # Grafana's label_values(selector, label): the second argument is a label name.
            label_values = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query)
            exprs.append(label_values.group(1) if label_values else query)
    return exprs


def exported_series_names() -> set[str]:
    """Series names the operator exports: from its registry once the module exists."""
    if importlib.util.find_spec("ckptbench.operator.runtime.metrics") is not None:
        metrics = importlib.import_module("ckptbench.operator.runtime.metrics")
        return set(metrics.metric_names())
    names = set()
    for name, kind in CONTRACT_METRICS.items():
        if kind == "counter":
            names.add(name if name.endswith("_total") else name + "_total")
        elif kind == "histogram":
            names |= {name, name + "_bucket", name + "_sum", name + "_count"}
        else:
            names.add(name)
    return names


def test_promql_metric_name_parser() -> None:
    expr = (
        'histogram_quantile(0.9, sum by (le, handler) (rate(a_seconds_bucket{x=~"$ns"}'
        "[$__rate_interval]))) / on(name) group_left b_total"
    )
    assert promql_metric_names(expr) == {"a_seconds_bucket", "b_total"}


def test_dashboard_uses_only_metrics_the_operator_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = dashboard_expressions(dashboard)
    assert len(exprs) >= 10
    exported = exported_series_names()
    used: set[str] = set()
    for expr in exprs:
        names = promql_metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= exported, f"{expr!r} uses {sorted(names - exported)}, not exported"
        used |= names
    # Every contract metric has a panel (histograms through their _bucket series).
    for name in CONTRACT_METRICS:
        assert any(u == name or u.startswith(name + "_") for u in used), f"{name} not shown"


def test_dashboard_configmap_carries_the_dashboard_for_the_grafana_sidecar(render: Any) -> None:
    (configmap,) = of_kind(render("dashboard"), "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["ckptbench.json"]) == json.loads(DASHBOARD.read_text())


# ---- values.yaml documentation --------------------------------------------------------------


def test_every_value_is_documented() -> None:
    """Each key has a comment above it, or sits under a key documented with `# --` (helm-docs)."""
    undocumented = []
    stack: list[tuple[int, bool]] = []  # (indent, documented-as-a-whole) of the enclosing keys
    comment: list[str] = []  # the comment block right above the current line
    for line in (CHART / "values.yaml").read_text().splitlines():
        stripped = line.strip()
        match = re.match(r"^( *)([A-Za-z_][\w]*):", line)
        if match:
            indent = len(match.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            if not comment and not any(whole for _, whole in stack):
                undocumented.append(match.group(2))
            stack.append((indent, bool(comment) and comment[0].startswith("# --")))
        if stripped.startswith("#"):
            comment.append(stripped)
        elif stripped:
            comment = []
    assert not undocumented, f"values without a comment: {undocumented}"


# ---- replicas: kopf's peering and the disruption budget --------------------------------------


@pytest.mark.parametrize("name", ["default", "namespaces", "cluster-wide"])
def test_two_replicas_peer_through_the_objects_the_chart_creates(render: Any, name: str) -> None:
    objects = render(name)
    (deployment,) = of_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    # The new pod joins (and leads) before an old one goes.
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    container = operator_container(objects)
    main = importlib.import_module("ckptbench.operator.runtime.main")
    options = main.parse_args(container["args"], environ={})
    assert options.peering_lifetime == 60
    identity = {"fieldRef": {"fieldPath": "metadata.name"}}
    assert {"name": main.ENV_POD_ID, "valueFrom": identity} in container["env"]
    if name == "cluster-wide":
        (peering,) = of_kind(objects, "ClusterKopfPeering")
        assert not of_kind(objects, "KopfPeering")
        assert peering["metadata"]["name"] == options.peering
    else:
        peerings = of_kind(objects, "KopfPeering")
        # One where kopf looks for it: in every namespace the operator watches.
        assert {p["metadata"]["namespace"] for p in peerings} == set(options.namespaces)
        assert {p["metadata"]["name"] for p in peerings} == {options.peering}
    (budget,) = of_kind(objects, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]


def test_one_replica_gets_no_budget_and_the_lifetime_reaches_the_operator(helm: str) -> None:
    result = run_helm(helm, *template_args(["replicaCount=1", "peering.lifetime=15"]))
    assert result.returncode == 0, result.stderr
    objects = tuple(d for d in yaml.safe_load_all(result.stdout) if d)
    assert not of_kind(objects, "PodDisruptionBudget")
    main = importlib.import_module("ckptbench.operator.runtime.main")
    assert main.parse_args(operator_container(objects)["args"], environ={}).peering_lifetime == 15


# ---- the Deployment's command line against the operator's parser ----------------------------


@pytest.mark.parametrize("name", ["default", "namespaces", "cluster-wide", "everything"])
def test_operator_accepts_the_deployments_arguments(render: Any, name: str) -> None:
    main = importlib.import_module("ckptbench.operator.runtime.main")
    container = operator_container(render(name))
    options = main.parse_args(container["args"], environ={})
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert options.metrics_port == ports["metrics"]
    assert options.health_port == ports["health"]
    assert options.default_image == "ckptbench-workload:0.1.0"
    if name == "cluster-wide":
        assert options.namespaces == ()
    else:
        (deployment,) = of_kind(render(name), "Deployment")
        roles = {r["metadata"]["namespace"] for r in of_kind(render(name), "Role")}
        assert set(options.namespaces) == roles, "RBAC must cover exactly the watched namespaces"
        assert deployment["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize("case", [str.lower, str.upper, str.capitalize])
def test_log_level_takes_what_the_operators_flag_takes_in_any_case(helm: str, case: Any) -> None:
    main = importlib.import_module("ckptbench.operator.runtime.main")
    for level in main.LOG_LEVELS:
        result = run_helm(helm, *template_args([f"logLevel={case(level)}"]))
        assert result.returncode == 0, result.stderr
        objects = tuple(d for d in yaml.safe_load_all(result.stdout) if d)
        assert main.parse_args(operator_container(objects)["args"], environ={}).log_level == level


def test_log_level_refuses_a_level_the_operator_does_not_know(helm: str) -> None:
    result = run_helm(helm, *template_args(["logLevel=trace"]))
    assert result.returncode != 0 and "/logLevel" in result.stderr, result.stderr


# ---- what benchmark pods may do beyond the restricted defaults --------------------------------


def test_network_policy_admits_only_benchmark_pods(helm: str) -> None:
    sets = ["workload.networkPolicy.enabled=true", "watch.namespaces={team-a,team-b}"]
    result = run_helm(helm, *template_args(sets))
    assert result.returncode == 0, result.stderr
    policies = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "NetworkPolicy"]
    assert {p["metadata"]["namespace"] for p in policies} == {"team-a", "team-b"}
    benchmark_pods = {"matchLabels": {"app.kubernetes.io/managed-by": "ckptbench-operator"}}
    for policy in policies:
        assert policy["spec"]["podSelector"] == benchmark_pods
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        assert policy["spec"]["ingress"] == [{"from": [{"podSelector": benchmark_pods}]}]


def test_allowed_tolerations_and_priority_classes_reach_the_operator(helm: str) -> None:
    sets = [
        "workload.allowedTolerationKeys={dedicated,spot}",
        "workload.allowedPriorityClassNames={batch-high}",
    ]
    result = run_helm(helm, *template_args(sets))
    assert result.returncode == 0, result.stderr
    objects = tuple(d for d in yaml.safe_load_all(result.stdout) if d)
    main = importlib.import_module("ckptbench.operator.runtime.main")
    options = main.parse_args(operator_container(objects)["args"], environ={})
    assert options.allowed_toleration_keys == {"dedicated", "spot"}
    assert options.allowed_priority_classes == {"batch-high"}
    default = main.parse_args(operator_container(render_default(helm))["args"], environ={})
    assert default.allowed_toleration_keys == default.allowed_priority_classes == frozenset()


def render_default(helm: str) -> tuple[dict[str, Any], ...]:
    result = run_helm(helm, *template_args([]))
    assert result.returncode == 0, result.stderr
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


# ---- people's roles, the packaged chart's notes and readme ------------------------------------


def test_editor_and_viewer_roles_aggregate_to_edit_and_view(render: Any) -> None:
    roles = {
        o["metadata"]["name"]: o
        for o in render("default")
        if o["kind"] == "ClusterRole" and aggregated(o)
    }
    editor, viewer = roles[f"{RELEASE}-ckptbench-editor"], roles[f"{RELEASE}-ckptbench-viewer"]
    assert editor["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert viewer["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    granted = rule_triples(editor["rules"])
    for kind in (
        "checkpointbenchmarks",
        "dataloadingbenchmarks",
        "checkpointbenchmarksweeps",
        "dataloadingbenchmarksweeps",
    ):
        assert ("ckptbench.dev", kind, "create") in granted
        assert ("ckptbench.dev", f"{kind}/status", "get") in granted
        assert ("ckptbench.dev", f"{kind}/status", "patch") not in granted
        assert ("ckptbench.dev", f"{kind}/status", "list") in rule_triples(viewer["rules"])
    assert {verb for _, _, verb in rule_triples(viewer["rules"])} == {"get", "list", "watch"}


def test_packaged_chart_carries_what_its_notes_and_readme_need(helm: str, tmp_path: Path) -> None:
    result = run_helm(helm, "package", str(CHART), "--destination", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (package,) = tmp_path.glob("ckptbench-*.tgz")
    with tarfile.open(package) as tar:
        packaged = {m.name: m for m in tar.getmembers()}
        notes = tar.extractfile("ckptbench/templates/NOTES.txt").read().decode()  # type: ignore[union-attr]
        for name in re.findall(r'\.Files\.Get "([^"]+)"', notes):
            assert f"ckptbench/{name}" in packaged, name
            data = tar.extractfile(f"ckptbench/{name}").read()  # type: ignore[union-attr]
            assert data == (ROOT / name).read_bytes(), f"{name} differs from the project's"
    assert "-f examples/" not in notes  # no path the package lacks
    readme = run_helm(helm, "show", "readme", str(package))
    assert readme.returncode == 0, readme.stderr
    for part in ("## Install", "## Values", "## Upgrade", "kubectl apply --server-side -f"):
        assert part in readme.stdout
    assert "PodDisruptionBudget" in readme.stdout


# ---- uninstall steps --------------------------------------------------------------------------


def uninstall_part(text: str, heading: str) -> str:
    """The text from ``heading`` to the next Markdown heading."""
    start = text.index(heading)
    following = text.find("\n## ", start + len(heading))
    return text[start : following if following > 0 else len(text)]


def test_uninstall_steps_delete_every_crd_the_chart_installs(helm: str) -> None:
    """Helm never deletes a chart's CRDs: each place that tells how to uninstall names them all."""
    crds = {yaml.safe_load(p.read_text())["metadata"]["name"] for p in (CHART / "crds").glob("*")}
    assert len(crds) == 6  # our four and kopf's two peering CRDs
    places = {
        "NOTES.txt": uninstall_part(install_notes(helm, []), "Uninstall"),
        "README.md": uninstall_part((ROOT / "README.md").read_text(), "Uninstall with"),
        "docs/install.md": uninstall_part((ROOT / "docs/install.md").read_text(), "## Uninstall"),
        "chart README": uninstall_part((CHART / "README.md").read_text(), "## Uninstall"),
    }
    for place, text in places.items():
        commands = re.findall(r"kubectl delete crd ([^\n`]+)", text)
        deleted = {name for command in commands for name in command.split()}
        assert crds <= deleted, f"{place} leaves {sorted(crds - deleted)} behind:\n{text}"


def test_chart_metadata_names_its_home_sources_icon_and_maintainers() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    home = chart["home"]
    assert home.startswith("https://") and chart["sources"] == [home]
    assert chart["maintainers"] and all(m.get("name") for m in chart["maintainers"])
    # The icon is the chart's own file, served from the home's repository.
    raw = home.replace("https://github.com/", "https://raw.githubusercontent.com/") + "/main/"
    assert chart["icon"].startswith(raw)
    assert (ROOT / chart["icon"].removeprefix(raw)).is_file()
