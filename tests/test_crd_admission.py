"""What the API server enforces with the generated CRDs beyond the field schemas, and what it
takes to enforce it:

- a benchmark's spec cannot be edited once its run started (a CEL transition rule), and the
  operator's own refusal (the SpecChangeRejected condition) agrees, edit for edit;
- list-type maps (conditions by type, sweep cells by number) with keys an API server accepts;
- the oldest Kubernetes that serves every CRD feature used, derived from the CRDs and stated in
  Chart.yaml's kubeVersion and the docs.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ckptbench.operator.runtime.reconcile import reconcile_once
from ckptbench.operator.spec import crd as benchmark_crd
from ckptbench.operator.spec import names as spec_names
from ckptbench.operator.sweep import crd as sweep_crd
from tests.crd_validation import cel_failures, schema_errors
from tests.test_reconcile import DEFAULTS, NAME, NOW, NS, SPEC, UID, FakeApi

ROOT = Path(__file__).resolve().parents[1]
CRD_FILES = [
    ROOT / benchmark_crd.CRD_FILE,
    ROOT / sweep_crd.CRD_FILE,
    ROOT / sweep_crd.DATA_CRD_FILE,
]
IMMUTABLE = "spec: spec is immutable once the run started"


class EditableApi(FakeApi):
    """The reconcile's stand-in API, whose benchmark's spec a test edits (as an API server
    without the CRD's rules would let it)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__(None)
        self.spec = spec

    def get_benchmark(self, namespace: str, name: str) -> dict[str, Any] | None:
        return {
            "apiVersion": spec_names.API_VERSION,
            "kind": spec_names.KIND,
            "metadata": {"name": name, "namespace": namespace, "uid": UID, "generation": 1},
            "spec": self.spec,
            "status": self.status,
        }


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c["type"] == type_), None)


def started() -> EditableApi:
    """A benchmark the operator started: its JobSet exists, its status says so."""
    api = EditableApi(dict(SPEC))
    reconcile_once(api, DEFAULTS, NS, NAME, NOW)
    assert api.jobset is not None
    assert condition(api.status, spec_names.JOBSET_CREATED)["status"] == "True"  # type: ignore[index]
    return api


EDITS: dict[str, dict[str, Any]] = {
    "worldSize": {"worldSize": 4},
    "backend": {"backend": "gcsfs"},
    "a field added": {"sampleCount": 7},
    "a field removed": {"image": None},
    "requests": {"resources": {"requests": {"cpu": "2"}}},
}


def edited(spec: dict[str, Any], edit: dict[str, Any]) -> dict[str, Any]:
    out = {**spec, **edit}
    return {k: v for k, v in out.items() if v is not None}


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edit_after_the_start_is_refused_by_cel_and_by_the_operator(edit: str) -> None:
    api = started()
    old = api.get_benchmark(NS, NAME)
    assert old is not None
    new = copy.deepcopy(old)
    new["spec"] = edited(old["spec"], EDITS[edit])
    assert schema_errors(new) == []
    assert IMMUTABLE in "\n".join(cel_failures(new, old=old)), cel_failures(new, old=old)
    # The twin: the same edit, let through, is refused by the operator.
    api.spec = new["spec"]
    reconcile_once(api, DEFAULTS, NS, NAME, NOW)
    rejected = condition(api.status, "SpecChangeRejected")
    assert rejected is not None and rejected["status"] == "True", api.status.get("conditions")


def test_what_is_not_a_spec_edit_passes_after_the_start() -> None:
    api = started()
    old = api.get_benchmark(NS, NAME)
    assert old is not None
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "storage"}
    assert cel_failures(new, old=old) == []
    # Defaults filled in by the API server are no edit either.
    assert cel_failures(copy.deepcopy(old), old=old) == []
    reconcile_once(api, DEFAULTS, NS, NAME, NOW)
    assert condition(api.status, "SpecChangeRejected") is None


def test_an_edit_before_the_start_fixes_a_spec_for_both() -> None:
    """A spec the operator refuses (an image its policy does not allow, which the CRD's own CEL
    cannot know) gets no JobSet: an edit that fixes it is admitted by CEL and run by the
    operator, as before the rule existed."""
    api = EditableApi({**SPEC, "image": "attacker.example/own:1"})
    reconcile_once(api, DEFAULTS, NS, NAME, NOW)
    assert api.jobset is None
    assert condition(api.status, spec_names.JOBSET_CREATED)["status"] == "False"  # type: ignore[index]
    old = api.get_benchmark(NS, NAME)
    assert old is not None
    new = copy.deepcopy(old)
    new["spec"] = dict(SPEC)
    assert cel_failures(new, old=old) == []
    api.spec = new["spec"]
    reconcile_once(api, DEFAULTS, NS, NAME, NOW)
    assert api.jobset is not None
    assert condition(api.status, "SpecChangeRejected") is None


def test_a_create_and_an_edit_before_any_status_pass() -> None:
    api = EditableApi(dict(SPEC))
    created = api.get_benchmark(NS, NAME)
    assert created is not None
    assert cel_failures(created) == []
    new = copy.deepcopy(created)
    new["spec"]["worldSize"] = 4
    assert cel_failures(new, old=created) == []


def test_a_sweep_template_stays_editable() -> None:
    """The operator takes a sweep's edits (it expands the cells anew): no rule refuses them."""
    schema = sweep_crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rules = [r for _, r in _all_rules(schema)]
    assert rules and not [r for r in rules if "oldSelf" in r["rule"]]


# ---- list-type maps ---------------------------------------------------------------------------


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, child in node.get("properties", {}).items():
            yield from _walk(child, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            yield from _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            yield from _walk(node["additionalProperties"], f"{path}{{}}")


def _all_rules(schema: dict[str, Any]) -> list[tuple[str, dict[str, str]]]:
    return [(p, r) for p, n in _walk(schema) for r in n.get("x-kubernetes-validations", [])]


def openapi(path: Path) -> dict[str, Any]:
    schema: dict[str, Any] = yaml.safe_load(path.read_text())["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"
    ]
    return schema


def test_conditions_and_sweep_cells_are_list_maps() -> None:
    benchmark = openapi(CRD_FILES[0])["properties"]["status"]["properties"]["conditions"]
    cells = openapi(CRD_FILES[1])["properties"]["status"]["properties"]["cells"]
    assert benchmark["x-kubernetes-list-type"] == "map"
    assert benchmark["x-kubernetes-list-map-keys"] == ["type"]
    assert cells["x-kubernetes-list-type"] == "map"
    assert cells["x-kubernetes-list-map-keys"] == ["cell"]


@pytest.mark.parametrize("path", CRD_FILES, ids=lambda p: p.name)
def test_every_list_map_has_keys_an_api_server_accepts(path: Path) -> None:
    """The API server refuses a CRD whose list-map keys are not scalar fields of the items that
    are required or defaulted."""
    maps = [(p, n) for p, n in _walk(openapi(path)) if n.get("x-kubernetes-list-type") == "map"]
    assert maps
    for where, node in maps:
        items = node["items"]
        assert items["type"] == "object", where
        for key in node["x-kubernetes-list-map-keys"]:
            field = items["properties"][key]
            assert field["type"] in ("string", "integer", "boolean"), (where, key)
            assert key in items.get("required", []) or "default" in field, (where, key)


def test_the_operator_writes_one_condition_per_type() -> None:
    api = started()
    api.spec = edited(api.spec, {"worldSize": 4})
    reconcile_once(api, DEFAULTS, NS, NAME, NOW)  # adds SpecChangeRejected
    types = [c["type"] for c in api.status["conditions"]]
    assert len(types) == len(set(types)), types
    schema = openapi(CRD_FILES[0])["properties"]["status"]["properties"]["conditions"]
    assert len(types) <= schema["maxItems"]


# ---- the oldest Kubernetes the CRDs need ------------------------------------------------------

# The Kubernetes minor version from which each CRD feature is served (on by default), from the
# Kubernetes documentation and release notes. A CRD using anything not listed fails the test
# below until its version is added here.
V1_CRD = (1, 16)  # apiextensions.k8s.io/v1: structural schemas, pruning, x-kubernetes-* markers
CEL_RULES = (1, 25)  # x-kubernetes-validations (rule, message), transition rules: beta, on
FEATURES: dict[str, tuple[int, int]] = {
    "x-kubernetes-preserve-unknown-fields": V1_CRD,
    "x-kubernetes-list-type": V1_CRD,
    "x-kubernetes-list-map-keys": V1_CRD,
    "x-kubernetes-map-type": V1_CRD,
    "x-kubernetes-int-or-string": V1_CRD,
    "x-kubernetes-embedded-resource": V1_CRD,
    "x-kubernetes-validations": CEL_RULES,
    "rule": CEL_RULES,
    "message": CEL_RULES,
    "oldSelf": CEL_RULES,  # transition rules came with validation rules
    "messageExpression": (1, 27),
    "reason": (1, 28),  # kubernetes/kubernetes#118041, in 1.28
    "fieldPath": (1, 28),  # the same change
    "optionalOldSelf": (1, 30),  # beta (on) in 1.30
    "selectableFields": (1, 31),  # beta (on) in 1.31
}
# Functions and macros of CEL itself (cel-go's standard definitions), there since 1.25.
CEL_STANDARD = {
    "has", "size", "matches", "startsWith", "endsWith", "contains", "exists", "exists_one",
    "all", "map", "filter", "int", "uint", "double", "string", "bool", "bytes", "type",
    "duration", "timestamp", "dyn",
}  # fmt: skip


def needed_features(crd: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Each CRD feature the CRD uses, with the Kubernetes version that serves it."""
    used: set[str] = set()
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    for version in crd["spec"]["versions"]:
        if "selectableFields" in version:
            used.add("selectableFields")
        for _, node in _walk(version["schema"]["openAPIV3Schema"]):
            used |= {key for key in node if key.startswith("x-kubernetes-")}
            for rule in node.get("x-kubernetes-validations", []):
                used |= set(rule)
                if "oldSelf" in rule["rule"]:
                    used.add("oldSelf")
                functions = set(re.findall(r"([A-Za-z_]\w*)\s*\(", rule["rule"]))
                unknown = functions - CEL_STANDARD
                assert not unknown, f"CEL functions of unknown Kubernetes version: {unknown}"
    missing = used - set(FEATURES)
    assert not missing, f"add the Kubernetes version that serves {missing} to FEATURES"
    return {feature: FEATURES[feature] for feature in used}


def minimum_kubernetes() -> tuple[int, int]:
    needs: dict[str, tuple[int, int]] = {}
    for path in CRD_FILES:
        needs.update(needed_features(yaml.safe_load(path.read_text())))
    return max(needs.values())


def test_the_crds_need_kubernetes_1_28_for_rule_field_paths_and_reasons() -> None:
    needs = needed_features(yaml.safe_load(CRD_FILES[0].read_text()))
    assert needs["fieldPath"] == needs["reason"] == (1, 28)
    assert minimum_kubernetes() == (1, 28)


def test_chart_kube_version_is_what_the_crds_need() -> None:
    major, minor = minimum_kubernetes()
    chart = yaml.safe_load((ROOT / "charts" / "ckptbench" / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">={major}.{minor}.0-0"


@pytest.mark.parametrize(
    "doc", ["README.md", "docs/install.md", "charts/ckptbench/README.md"], ids=str
)
def test_docs_state_the_kubernetes_version_the_crds_need(doc: str) -> None:
    major, minor = minimum_kubernetes()
    stated = re.findall(r"Kubernetes (\d+)\.(\d+) or newer", (ROOT / doc).read_text())
    assert stated, f"{doc} does not say which Kubernetes it needs"
    assert {(int(a), int(b)) for a, b in stated} == {(major, minor)}, doc
