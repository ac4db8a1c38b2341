"""Cross-field rules of where a benchmark's pods run and what they mount: volumes and their
mounts, tolerations, node selection, priority classes (rules of the CR alone: the settings' own
are declared beside the settings).

Kept from the cluster's own: no toleration, node selector or node affinity reaches the control
plane (the same keys, :data:`CONTROL_PLANE_KEYS`), no system priority class, no mount reaches
outside its volume or over the operator's temporary folder.
"""

from __future__ import annotations

import re
from typing import Any

from ckptbench.operator.spec.names import (
    CONTROL_PLANE_KEYS,
    PARENT_STEP,
    SYSTEM_PRIORITY_PREFIX,
    TMP_PATH,
    TMP_VOLUME,
    VOLUME_SOURCES,
)
from ckptbench.operator.spec.rule import PodFields
from ckptbench.workload.contract.rule import Rule


def _mounts_name_volumes(spec: PodFields) -> bool:
    names = {volume.get("name") for volume in spec.volumes}
    return all(mount.get("name") in names for mount in spec.volume_mounts)


def _volume_names_unique(spec: PodFields) -> bool:
    names = [volume.get("name") for volume in spec.volumes]
    return len(names) == len(set(names))


def _one_source_each(spec: PodFields) -> bool:
    return all(sum(source in v for source in VOLUME_SOURCES) == 1 for v in spec.volumes)


# Node affinity's operators that draw pods to nodes with a label (NotIn and DoesNotExist keep
# them away, Gt and Lt compare numbers).
ATTRACTING_OPERATORS: tuple[str, ...] = ("In", "Exists")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _node_selector_terms(affinity: object) -> list[dict[str, Any]]:
    """Every node selector term of ``affinity``, required and preferred; whatever is not of
    the shape Kubernetes gives it is skipped (the pod API refuses it)."""
    node = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    if not isinstance(node, dict):
        return []
    terms: list[object] = []
    required = node.get(_REQUIRED)
    if isinstance(required, dict) and isinstance(required.get("nodeSelectorTerms"), list):
        terms += required["nodeSelectorTerms"]
    preferred = node.get(_PREFERRED)
    if isinstance(preferred, list):
        terms += [p.get("preference") for p in preferred if isinstance(p, dict)]
    return [t for t in terms if isinstance(t, dict)]


def _affinity_keeps_off_the_control_plane(spec: PodFields) -> bool:
    for term in _node_selector_terms(spec.affinity):
        expressions = term.get("matchExpressions")
        for e in expressions if isinstance(expressions, list) else []:
            if (
                isinstance(e, dict)
                and e.get("key") in CONTROL_PLANE_KEYS
                and e.get("operator") in ATTRACTING_OPERATORS
            ):
                return False
    return True


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


_ONE_SOURCE_CEL = " + ".join(f"(has(v.{source}) ? 1 : 0)" for source in VOLUME_SOURCES)


def _term_cel(term: str) -> str:
    """CEL: the node selector term ``term`` draws no pod to a control-plane label."""
    return (
        f"(!has({term}.matchExpressions) || {term}.matchExpressions.all(e, !has(e.key) || "
        f"!(e.key in {_cel_list(CONTROL_PLANE_KEYS)}) || !has(e.operator) || "
        f"!(e.operator in {_cel_list(ATTRACTING_OPERATORS)})))"
    )


_NODE = "self.affinity.nodeAffinity"
# Every step is optional in the schema (AFFINITY_SCHEMA), so each is tested with has() first.
_AFFINITY_CEL = (
    f"!has(self.affinity) || !has({_NODE}) || "
    f"((!has({_NODE}.{_REQUIRED}) || !has({_NODE}.{_REQUIRED}.nodeSelectorTerms) || "
    f"{_NODE}.{_REQUIRED}.nodeSelectorTerms.all(t, {_term_cel('t')})) && "
    f"(!has({_NODE}.{_PREFERRED}) || {_NODE}.{_PREFERRED}.all(p, !has(p.preference) || "
    f"{_term_cel('p.preference')})))"
)


POD_RULES: tuple[Rule[PodFields], ...] = (
    Rule(
        "workload_priority_class_name",
        "!has(self.workloadPriorityClassName) || has(self.queueName)",
        "requires {queue_name}: only Kueue reads it",
        lambda s: s.workload_priority_class_name is None or s.queue_name is not None,
    ),
    Rule(
        "volume_mounts",
        "!has(self.volumeMounts) || size(self.volumeMounts) == 0 || (has(self.volumes) && "
        "self.volumeMounts.all(m, self.volumes.exists(v, v.name == m.name)))",
        "entries must each name one of {volumes}",
        _mounts_name_volumes,
    ),
    Rule(
        "volumes",
        "!has(self.volumes) || self.volumes.all(v, self.volumes.exists_one(w, w.name == v.name))",
        "names must be unique",
        _volume_names_unique,
    ),
    Rule(
        "volumes",
        f"!has(self.volumes) || self.volumes.all(v, {_ONE_SOURCE_CEL} == 1)",
        "must each have exactly one source, of the kinds persistentVolumeClaim, csi, "
        "emptyDir, configMap, secret",
        _one_source_each,
    ),
    Rule(
        "volumes",
        f"!has(self.volumes) || self.volumes.all(v, v.name != '{TMP_VOLUME}')",
        f"must not be named {TMP_VOLUME}: the operator mounts that emptyDir at {TMP_PATH}",
        lambda s: all(v.get("name") != TMP_VOLUME for v in s.volumes),
    ),
    Rule(
        "volume_mounts",
        f"!has(self.volumeMounts) || self.volumeMounts.all(m, m.mountPath != '{TMP_PATH}' && "
        f"m.mountPath != '{TMP_PATH}/')",
        f"must not mount over {TMP_PATH}: the operator's emptyDir for temporary files",
        lambda s: all(
            m.get("mountPath") not in (TMP_PATH, TMP_PATH + "/") for m in s.volume_mounts
        ),
    ),
    Rule(
        "volume_mounts",
        "!has(self.volumeMounts) || self.volumeMounts.all(m, (!has(m.subPath) || "
        f"!m.subPath.matches('{PARENT_STEP}')) && (!has(m.subPathExpr) || "
        f"!m.subPathExpr.matches('{PARENT_STEP}')))",
        "subPath and subPathExpr must be relative paths without '..': a mount may "
        "not reach outside its volume",
        lambda s: all(
            not re.search(PARENT_STEP, str(m.get(key, "")))
            for m in s.volume_mounts
            for key in ("subPath", "subPathExpr")
        ),
    ),
    Rule(
        "tolerations",
        "!has(self.tolerations) || self.tolerations.all(t, has(t.key) && t.key != '')",
        "must each name a taint key: an empty key with operator Exists tolerates every taint",
        lambda s: all(t.get("key") for t in s.tolerations),
    ),
    Rule(
        "tolerations",
        f"!has(self.tolerations) || self.tolerations.all(t, !has(t.key) || "
        f"!(t.key in {_cel_list(CONTROL_PLANE_KEYS)}))",
        "must not tolerate control-plane taints",
        lambda s: all(t.get("key") not in CONTROL_PLANE_KEYS for t in s.tolerations),
    ),
    Rule(
        "node_selector",
        "!has(self.nodeSelector) || "
        f"self.nodeSelector.all(k, !(k in {_cel_list(CONTROL_PLANE_KEYS)}))",
        "must not select control-plane nodes",
        lambda s: not set(s.node_selector or {}) & set(CONTROL_PLANE_KEYS),
    ),
    Rule(
        "affinity",
        _AFFINITY_CEL,
        "must not require or prefer control-plane nodes (node affinity In or Exists on "
        + ", ".join(CONTROL_PLANE_KEYS)
        + ")",
        _affinity_keeps_off_the_control_plane,
    ),
    Rule(
        "priority_class_name",
        f"!has(self.priorityClassName) || "
        f"!self.priorityClassName.startsWith('{SYSTEM_PRIORITY_PREFIX}')",
        f"must not be a {SYSTEM_PRIORITY_PREFIX}* class: those keep the cluster itself running",
        lambda s: not (s.priority_class_name or "").startswith(SYSTEM_PRIORITY_PREFIX),
    ),
)
