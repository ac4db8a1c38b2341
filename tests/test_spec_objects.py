"""The Python twin of the CRD's checks on the Kubernetes objects a spec embeds: each bad item is
refused naming its field, index and key, before anything is rendered."""

from __future__ import annotations

from typing import Any

import pytest

from ckptbench.operator.spec.parse import SpecError, parse_spec

BASE = {"checkpointPath": "gs://bucket/x"}
MOUNT = {"name": "data", "mountPath": "/data"}


@pytest.mark.parametrize(
    ("field", "items", "problem"),
    [
        ("volumes", [{"name": "v", "hostPath": {}}], "spec.volumes[0].hostPath: volume kind"),
        (
            "volumes",
            [{"name": "v", "emptyDir": "x"}],
            "spec.volumes[0].emptyDir: must be an object",
        ),
        ("volumes", [{"name": "Not_A_Label", "emptyDir": {}}], "spec.volumes[0].name"),
        ("volumeMounts", [{"name": "v", "mountPath": "rel"}], "[0].mountPath: must be an absolute"),
        ("volumeMounts", [{**MOUNT, "readOnly": "yes"}], "[0].readOnly: must be true or false"),
        ("volumeMounts", [{**MOUNT, "subPath": 3}], "[0].subPath: must be a string"),
        ("volumeMounts", [{**MOUNT, "subPathExpr": ["x"]}], "[0].subPathExpr: must be a string"),
        ("volumeMounts", [{**MOUNT, "propagation": "x"}], "[0].propagation: a mount may set only"),
        ("tolerations", [{"key": 1}], "spec.tolerations[0].key: must be a string"),
        ("tolerations", [{"key": "k", "value": 2}], "spec.tolerations[0].value: must be a string"),
        ("tolerations", [{"key": "k", "operator": "Maybe"}], "[0].operator: must be one of"),
        ("tolerations", [{"key": "k", "effect": "Sometimes"}], "[0].effect: must be one of"),
        ("tolerations", [{"key": "k", "tolerationSeconds": True}], "[0].tolerationSeconds: must"),
        ("tolerations", [{"key": "k", "tolerationSeconds": "9"}], "[0].tolerationSeconds: must"),
        ("tolerations", [{"key": "k"}, {"key": "k", "colour": "x"}], "[1].colour: a toleration"),
    ],
)
def test_a_bad_item_is_refused_naming_its_key(field: str, items: Any, problem: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({**BASE, field: items})
    assert any(problem in p and p.startswith(f"spec.{field}[") for p in caught.value.problems), (
        caught.value.problems
    )


@pytest.mark.parametrize(
    ("field", "items"),
    [
        ("volumes", [{"name": "data", "emptyDir": {}}]),
        ("tolerations", [{"key": "k", "operator": "Equal", "value": "v", "tolerationSeconds": 5}]),
    ],
)
def test_a_good_item_passes(field: str, items: Any) -> None:
    assert parse_spec({**BASE, field: items})
