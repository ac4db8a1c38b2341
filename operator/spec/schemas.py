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


def _free(description: str) -> dict[str, Any]:
    return {**FREE_OBJECT, "description": description}


# Every field carries a description, as Kubernetes' own types do, so `kubectl explain` says
# what each is (tests/test_crd.py walks every schema for one without).
RESOURCES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "limits": _free(
            "The most a rank's container may use, as a pod's: cpu, memory, ephemeral-storage "
            "quantities."
        ),
        "requests": _free(
            "What a rank's container is scheduled with, as a pod's: cpu, memory, "
            "ephemeral-storage quantities."
        ),
    },
}
_VOLUME_SOURCE_DESCRIPTIONS = {
    "persistentVolumeClaim": "A PersistentVolumeClaim in the benchmark's namespace "
    "(claimName, readOnly); a shared checkpoint folder needs one every rank can mount "
    "(ReadWriteMany).",
    "csi": "A CSI ephemeral volume (driver, volumeAttributes, nodePublishSecretRef), e.g. the GCS "
    "FUSE or a Lustre driver.",
    "emptyDir": "An empty directory for the pod's life (medium, sizeLimit): each rank's own, not "
    "shared between ranks.",
    "configMap": "A ConfigMap's keys as files (name, items with relative paths).",
    "secret": "A Secret's keys as files (secretName, items with relative paths); the chart's "
    "workload.allowedSecretNames lists the Secrets a benchmark may mount.",
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
            "name": {
                "type": "string",
                "maxLength": 63,
                "pattern": DNS_LABEL,
                "description": "The volume's name, unique in the spec; volumeMounts name it.",
            },
            **{source: _free(_VOLUME_SOURCE_DESCRIPTIONS[source]) for source in VOLUME_SOURCES},
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
            "name": {
                "type": "string",
                "maxLength": 63,
                "pattern": DNS_LABEL,
                "description": "The volume to mount: one of volumes.",
            },
            "mountPath": {
                "type": "string",
                "maxLength": 1024,
                "pattern": "^/",
                "description": "Where in a rank's container, an absolute path (not /tmp, the "
                "operator's own); a file checkpointPath lies under one of these.",
            },
            "readOnly": {"type": "boolean", "description": "Mount it read-only."},
            "subPath": {
                "type": "string",
                "maxLength": 1024,
                "description": "A relative path inside the volume to mount instead of its root "
                "(no '..').",
            },
            "subPathExpr": {
                "type": "string",
                "maxLength": 1024,
                "description": "As subPath, with $(VAR) expanded from the container's "
                "environment (e.g. $(POD_NAME)); relative, no '..'.",
            },
        },
    },
}
TOLERATIONS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "maxItems": MAX_LIST_ITEMS,
    "items": {
        "type": "object",
        "properties": {
            "key": {
                "type": "string",
                "maxLength": 317,
                "description": "The taint key tolerated; the chart's "
                "workload.allowedTolerationKeys lists the keys a benchmark may name.",
            },
            "operator": {
                "type": "string",
                "enum": list(TOLERATION_OPERATORS),
                "description": "Equal (the taint's value must be value) or Exists (any value).",
            },
            "value": {
                "type": "string",
                "maxLength": 63,
                "description": "The taint value tolerated, with operator Equal.",
            },
            "effect": {
                "type": "string",
                "enum": list(TAINT_EFFECTS),
                "description": "The taint effect tolerated; empty: every effect.",
            },
            "tolerationSeconds": {
                "type": "integer",
                "description": "With effect NoExecute: how long a rank stays on a node after "
                "the taint appears (unset: for ever).",
            },
        },
    },
}


# Affinity stays free-form but for the path to node affinity's match expressions: an API server's
# CEL sees no field a schema leaves undeclared, so the rule that keeps pods off control-plane
# nodes (pod_rules) needs these declared; everything else in it is preserved as given.
def _open(description: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {**_free(description), "properties": properties}


_MATCH_EXPRESSIONS: dict[str, Any] = {
    "type": "array",
    "maxItems": MAX_LIST_ITEMS,
    "description": "Node label requirements, all of which a node must meet.",
    "items": _open(
        "A node label requirement: key, operator, values.",
        {
            "key": {
                "type": "string",
                "maxLength": 317,
                "description": "The node label key; never a control-plane one with In or Exists.",
            },
            "operator": {
                "type": "string",
                "maxLength": 16,
                "description": "In, NotIn, Exists, DoesNotExist, Gt or Lt.",
            },
        },
    ),
}
_NODE_SELECTOR_TERM: dict[str, Any] = _open(
    "A node selector term (matchExpressions, matchFields).",
    {"matchExpressions": _MATCH_EXPRESSIONS},
)
AFFINITY_SCHEMA: dict[str, Any] = _open(
    "Affinity of the pods (a Kubernetes Affinity object).",
    {
        "nodeAffinity": _open(
            "Which nodes the pods may, or prefer to, run on.",
            {
                "requiredDuringSchedulingIgnoredDuringExecution": _open(
                    "Nodes the pods must run on: any one of the terms.",
                    {
                        "nodeSelectorTerms": {
                            "type": "array",
                            "maxItems": MAX_LIST_ITEMS,
                            "description": "Terms of which a node must meet one.",
                            "items": _NODE_SELECTOR_TERM,
                        }
                    },
                ),
                "preferredDuringSchedulingIgnoredDuringExecution": {
                    "type": "array",
                    "maxItems": MAX_LIST_ITEMS,
                    "description": "Nodes the scheduler prefers, each term with a weight.",
                    "items": _open(
                        "A weighted preference (weight, preference).",
                        {"preference": _NODE_SELECTOR_TERM},
                    ),
                },
            },
        )
    },
)
