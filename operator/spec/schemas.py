"""CRD schemas of the spec's free-form Kubernetes fields (resources, volumes, tolerations, ...).

Pydantic would describe these as open objects; the CRD needs them structural, with unknown fields
preserved, and with bounded sizes so the API server can estimate the cost of the CEL rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ckptbench.operator.spec.names import (
    DNS_LABEL,
    MAX_LIST_ITEMS,
    TAINT_EFFECTS,
    TOLERATION_OPERATORS,
    VOLUME_SOURCES,
)


def crd_schema(schema: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def replace(generated: dict[str, Any]) -> None:
        description = generated.get("description")
        generated.clear()
        generated.update(schema)
        if description:
            generated["description"] = description

    return replace


FREE_OBJECT: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
RESOURCES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "limits": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "requests": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}
# Volumes, mounts and tolerations list their keys without preserving unknown ones: strict field
# validation (kubectl's default) rejects a hostPath or a mountPropagation by name, and a server
# that prunes instead leaves a volume without a source, which a CEL rule rejects.
VOLUMES_SCHEMA: dict[str, Any] = {
    "type": "array",
    "maxItems": MAX_LIST_ITEMS,
    "items": {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "maxLength": 63, "pattern": DNS_LABEL},
            **{source: FREE_OBJECT for source in VOLUME_SOURCES},
        },
    },
}
VOLUME_MOUNTS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "maxItems": MAX_LIST_ITEMS,
    "items": {
        "type": "object",
        "required": ["name", "mountPath"],
        "properties": {
            "name": {"type": "string", "maxLength": 63, "pattern": DNS_LABEL},
            "mountPath": {"type": "string", "maxLength": 1024, "pattern": "^/"},
            "readOnly": {"type": "boolean"},
            "subPath": {"type": "string", "maxLength": 1024},
            "subPathExpr": {"type": "string", "maxLength": 1024},
        },
    },
}
TOLERATIONS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "maxItems": MAX_LIST_ITEMS,
    "items": {
        "type": "object",
        "properties": {
            "key": {"type": "string", "maxLength": 317},
            "operator": {"type": "string", "enum": list(TOLERATION_OPERATORS)},
            "value": {"type": "string", "maxLength": 63},
            "effect": {"type": "string", "enum": list(TAINT_EFFECTS)},
            "tolerationSeconds": {"type": "integer"},
        },
    },
}
