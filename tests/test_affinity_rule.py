"""Node affinity may not reach control-plane nodes, as nodeSelector and tolerations may not
(issue 33, item 6): the CEL rule the API server runs and its Python twin in the operator agree on
a table of affinities, the free-form ones included."""

from __future__ import annotations

from typing import Any

import pytest

from ckptbench.operator.spec import names as spec_names
from ckptbench.operator.spec.names import CONTROL_PLANE_KEYS
from ckptbench.operator.spec.parse import SpecError, parse_spec
from tests.crd_validation import cel_failures, schema_errors

GOOD: dict[str, Any] = {"checkpointPath": "gs://bucket/ckpt", "worldSize": 4}
MESSAGE = "affinity must not require or prefer control-plane nodes"


def _expr(key: str, operator: str, values: list[str] | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": operator}
    if values is not None:
        e["values"] = values
    return e


def _required(*expressions: dict[str, Any], more_terms: int = 0) -> dict[str, Any]:
    terms = [{"matchExpressions": [_expr("pool", "In", ["ckpt"])]}] * more_terms
    terms.append({"matchExpressions": list(expressions)})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}  # fmt: skip


def _preferred(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [_expr("zone", "Exists")]}},
        {"weight": 50, "preference": {"matchExpressions": list(expressions)}},
    ]}}  # fmt: skip


CP, MASTER = CONTROL_PLANE_KEYS
# (id, affinity, refused)
TABLE: list[tuple[str, dict[str, Any], bool]] = [
    ("required-in-control-plane", _required(_expr(CP, "In", [""])), True),
    ("required-exists-control-plane", _required(_expr(CP, "Exists")), True),
    ("required-exists-master", _required(_expr(MASTER, "Exists")), True),
    ("required-second-term", _required(_expr(MASTER, "In", ["true"]), more_terms=1), True),
    ("preferred-exists-control-plane", _preferred(_expr(CP, "Exists")), True),
    ("preferred-in-master", _preferred(_expr(MASTER, "In", [""])), True),
    (
        "both-one-bad",
        {
            "nodeAffinity": {
                **_required(_expr("pool", "In", ["a"]))["nodeAffinity"],
                **_preferred(_expr(CP, "Exists"))["nodeAffinity"],
            }
        },
        True,
    ),
    ("required-does-not-exist-control-plane", _required(_expr(CP, "DoesNotExist")), False),
    ("required-not-in-master", _required(_expr(MASTER, "NotIn", ["x"])), False),
    ("preferred-does-not-exist", _preferred(_expr(CP, "DoesNotExist")), False),
    ("required-other-key", _required(_expr("node-role.kubernetes.io/worker", "Exists")), False),
    ("a-key-that-only-contains-it", _required(_expr(CP + "-not", "Exists")), False),
    ("pod-anti-affinity-only", {"podAntiAffinity": {"x": 1}}, False),
    ("empty", {}, False),
    ("node-affinity-empty", {"nodeAffinity": {}}, False),
    (
        "required-without-terms",
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
        False,
    ),
    (
        "term-without-expressions",
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["n1"]}
                            ]
                        }
                    ]
                }
            }
        },
        False,
    ),
    (
        "preferred-without-preference",
        {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}},
        False,
    ),
    ("expression-without-operator", _required({"key": CP}), False),
    ("expression-without-key", _required({"operator": "Exists"}), False),
]


def _benchmark(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": spec_names.API_VERSION,
        "kind": spec_names.KIND,
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": spec,
    }


def _python_refuses(spec: dict[str, Any]) -> bool:
    try:
        parse_spec(spec)
    except SpecError as exc:
        return f"spec.{MESSAGE}" in [p.split(" (", 1)[0] for p in exc.problems]
    return False


@pytest.mark.parametrize(("affinity", "refused"), [(a, r) for _, a, r in TABLE],
                         ids=[i for i, _, _ in TABLE])  # fmt: skip
def test_cel_and_python_agree_on_affinity(affinity: dict[str, Any], refused: bool) -> None:
    spec = {**GOOD, "affinity": affinity}
    obj = _benchmark(spec)
    assert schema_errors(obj) == []  # the declared path keeps every shape the pod API takes
    by_cel = [f for f in cel_failures(obj) if f.endswith(MESSAGE + " (node affinity In or "
                                                         f"Exists on {CP}, {MASTER})")]  # fmt: skip
    assert bool(by_cel) is refused, cel_failures(obj)
    assert all(f.startswith("spec.affinity: ") for f in by_cel), by_cel
    assert _python_refuses(spec) is refused


def test_the_affinity_rule_uses_the_node_selector_rule_keys() -> None:
    from ckptbench.operator.spec import pod_rules

    (rule,) = [r for r in pod_rules.POD_RULES if r.field == "affinity"]
    (selector,) = [r for r in pod_rules.POD_RULES if r.field == "node_selector"]
    for key in CONTROL_PLANE_KEYS:
        assert f"'{key}'" in rule.cel and f"'{key}'" in selector.cel
