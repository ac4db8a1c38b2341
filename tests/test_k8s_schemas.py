"""The schema helper must reject what the real schemas reject, or every schema test is hollow."""

from __future__ import annotations

import jsonschema
import pytest

from tests.k8s_schemas import UnknownKind, validate


def _pod(**spec: object) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }


def test_valid_pod_passes() -> None:
    validate(_pod())


@pytest.mark.parametrize(
    "obj",
    [
        _pod(restartPolicy=3),
        _pod(unknownField=True),
        {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"image": "x"}]}},
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "spec": {"replicatedJobs": [{"name": "w", "replicas": "two"}]},
        },
    ],
)
def test_invalid_objects_fail(obj: dict[str, object]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        validate(obj)


def test_unknown_kind_is_an_error() -> None:
    with pytest.raises(UnknownKind):
        validate({"apiVersion": "example.com/v1", "kind": "Nope"})
