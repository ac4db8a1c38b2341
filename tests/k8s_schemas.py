"""Validate Kubernetes objects against the real schemas vendored under tests/schemas/."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMAS = Path(__file__).parent / "schemas"

# Core kinds -> file under schemas/k8s (named <kind>-<group>-<version>.json upstream).
_CORE = {
    ("v1", "Pod"): "pod-v1.json",
    ("v1", "ConfigMap"): "configmap-v1.json",
    ("v1", "Service"): "service-v1.json",
    ("v1", "ServiceAccount"): "serviceaccount-v1.json",
    ("apps/v1", "Deployment"): "deployment-apps-v1.json",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudget-policy-v1.json",
    ("batch/v1", "Job"): "job-batch-v1.json",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "clusterrole-rbac-v1.json",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "clusterrolebinding-rbac-v1.json",
    ("rbac.authorization.k8s.io/v1", "Role"): "role-rbac-v1.json",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebinding-rbac-v1.json",
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): (
        "customresourcedefinition-apiextensions-v1.json"
    ),
}


# Kinds no vendored copy covers: schemas written for these tests (schemas/written/, see README).
_WRITTEN = {
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): (
        "validatingadmissionpolicy-admissionregistration-v1.json"
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (
        "validatingadmissionpolicybinding-admissionregistration-v1.json"
    ),
}


class UnknownKind(LookupError):
    pass


@functools.cache
def _load(path: Path) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(path.read_text())
    return schema


def schema_for(api_version: str, kind: str) -> dict[str, Any]:
    core = _CORE.get((api_version, kind))
    if core:
        return _load(SCHEMAS / "k8s" / core)
    written = _WRITTEN.get((api_version, kind))
    if written:
        return _load(SCHEMAS / "written" / written)
    if "/" in api_version:
        group, version = api_version.split("/", 1)
        path = SCHEMAS / "crd" / f"{group}_{version}_{kind}.json"
        if path.exists():
            return _load(path)
        own = _project_crds().get((group, version, kind))
        if own is not None:
            return own
    raise UnknownKind(f"no vendored schema for apiVersion={api_version!r} kind={kind!r}")


@functools.cache
def _project_crds() -> dict[tuple[str, str, str], dict[str, Any]]:
    """The schema of each kind the project's own CRDs (crds/) define, by group, version, kind:
    kopf's peering objects, which the chart ships, have no upstream schema to vendor."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for path in sorted((Path(__file__).parents[1] / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]
        for version in spec["versions"]:
            schema = dict(version["schema"]["openAPIV3Schema"])
            # Every object carries apiVersion, kind and metadata, which a CRD's schema leaves out.
            schema["properties"] = {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string", "enum": [spec["names"]["kind"]]},
                "metadata": {"type": "object"},
                **schema.get("properties", {}),
            }
            schema["additionalProperties"] = False
            found[(spec["group"], version["name"], spec["names"]["kind"])] = schema
    return found


def pod_template_schema() -> dict[str, Any]:
    return _load(SCHEMAS / "k8s" / "podtemplatespec-v1.json")


def validate(obj: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError (with the failing path) when ``obj`` is not valid.

    The CRD schemas are not strict about apiVersion/kind at the top, so those are checked here.
    """
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise jsonschema.ValidationError(f"object has no apiVersion/kind: {obj!r:.200}")
    schema = schema_for(api_version, kind)
    jsonschema.validate(obj, schema, cls=jsonschema.Draft7Validator)


def validate_pod_template(template: dict[str, Any]) -> None:
    jsonschema.validate(template, pod_template_schema(), cls=jsonschema.Draft7Validator)
