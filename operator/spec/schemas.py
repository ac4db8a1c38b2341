"""CRD schemas of the spec's free-form Kubernetes fields (resources, volumes, tolerations, ...).

Pydantic would describe these as open objects; the CRD needs them structural, with unknown fields
preserved, and with bounded sizes so the API server can estimate the cost of the CEL rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ckptbench.operator.spec.names import DNS_LABEL, MAX_LIST_ITEMS


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
        "claims": {
            "type": "array",
            "maxItems": MAX_LIST_ITEMS,
            "items": FREE_OBJECT,
        },
    },
}
VOLUMES_SCHEMA: dict[str, Any] = {
    "type": "array",
    "maxItems": MAX_LIST_ITEMS,
    "items": {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string", "maxLength": 63, "pattern": DNS_LABEL}},
        "x-kubernetes-preserve-unknown-fields": True,
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
        },
        "x-kubernetes-preserve-unknown-fields": True,
    },
}
TOLERATIONS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "maxItems": MAX_LIST_ITEMS,
    "items": FREE_OBJECT,
}
