"""The CR's own cross-field rules (:data:`RULES_OF_THE_CR`): what only a cluster has to say about
paths, sizes and secrets, then the pods' (:mod:`.pod_rules`). Each is a
:class:`~ckptbench.workload.contract.rule.Rule`: the CEL the API server runs and its Python twin,
which runs in the operator and in ``ckptbench render`` (objects that never went through an API
server). The rules on the benchmark's settings are declared beside them
(``settings.SETTINGS_RULES``, which the rank's config runs too); the spec's model carries both.
"""

from __future__ import annotations

import re
from typing import Any

from ckptbench.operator.spec.names import (
    JOBSET_CREATED,
    MAX_TOTAL_BYTES,
)
from ckptbench.operator.spec.pod_rules import POD_RULES
from ckptbench.operator.spec.rule import Spec
from ckptbench.workload.contract.checkpoint import memory_plan, sizes
from ckptbench.workload.contract.choices import Backend
from ckptbench.workload.contract.rule import Rule
from ckptbench.workload.contract.state_settings import LAYER_SIZE_CEL, PADDING_SIZE_CEL

# A '..' path segment (RE2 and Python's re read it alike).
BACKSTEP = "(^|/)[.][.](/|$)"


def under_a_mount(path: str, mounts: list[dict[str, Any]]) -> bool:
    """Whether ``path`` is one of ``mounts``' paths or lies under one (as written: see the rule
    that refuses a '..' segment first)."""
    for mount in mounts:
        mount_path = str(mount.get("mountPath", ""))
        prefix = mount_path if mount_path.endswith("/") else mount_path + "/"
        if path == mount_path or path.startswith(prefix):
            return True
    return False


RULES_OF_THE_CR: tuple[Rule[Spec], ...] = (
    Rule(
        "layer_size",
        f"has(self.model) || {LAYER_SIZE_CEL} * {PADDING_SIZE_CEL} * "
        f"{sizes.COLUMNS * sizes.FLOAT32_BYTES} <= {MAX_TOTAL_BYTES}",
        "* {padding_size} * 4000 bytes (the whole checkpoint) must be at most 64 TiB",
        lambda s: (
            s.model is not None
            or sizes.total_bytes(s.layer_size, s.padding_size) <= MAX_TOTAL_BYTES
        ),
    ),
    Rule(
        "model",
        "!has(self.model) || !self.model.endsWith('.json')",
        "takes a preset or shipped config by name here: a config.json path is for local runs "
        "(the operator sizes each rank's memory before its pod starts, from no file of its own)",
        lambda s: s.model is None or not s.model.endswith(".json"),
    ),
    Rule(
        "checkpoint_path",
        "self.backend != 'file' || self.checkpointPath.startsWith('/')",
        "must be an absolute path for {backend} file",
        lambda s: s.backend is not Backend.FILE or s.checkpoint_path.startswith("/"),
    ),
    # Before the rule that the path lie under a mount: that rule compares the path as written,
    # and '..' is the one segment that leaves a prefix ("/data/../etc" starts with "/data/").
    # CEL cannot resolve a path, so a backstep is refused rather than resolved ('.' and '//' stay
    # under their prefix, as Kubernetes' own mountPath check reasons).
    Rule(
        "checkpoint_path",
        f"self.backend != 'file' || !self.checkpointPath.matches('{BACKSTEP}')",
        "must not contain a '..' segment for {backend} file: the path must name the place it "
        "reaches, so the rule that it lie under a volume mount holds",
        lambda s: s.backend is not Backend.FILE or not re.search(BACKSTEP, s.checkpoint_path),
    ),
    Rule(
        "checkpoint_path",
        "self.backend != 'file' || (self.worldSize == 1 && (!has(self.loadWorldSize) || "
        "self.loadWorldSize == 1)) || (has(self.volumeMounts) && "
        "self.volumeMounts.exists(m, self.checkpointPath == m.mountPath || "
        "self.checkpointPath.startsWith(m.mountPath.endsWith('/') ? m.mountPath : "
        "m.mountPath + '/')))",
        "must lie under one of {volume_mounts} for {backend} file with more than one rank "
        "({world_size} or {load_world_size} > 1): every rank reads the metadata rank 0 writes, "
        "so they need a shared volume",
        lambda s: (
            s.backend is not Backend.FILE
            or s.rank_count == 1
            or under_a_mount(s.checkpoint_path, s.volume_mounts)
        ),
    ),
    Rule(
        "s3_credentials_secret",
        "!has(self.s3CredentialsSecret) || self.backend in ['s3', 's3fs']",
        "is for backends s3 and s3fs",
        lambda s: s.s3_credentials_secret is None or s.backend in (Backend.S3, Backend.S3FS),
    ),
    *POD_RULES,
)


# A benchmark's spec is fixed once its run started: the operator renders the JobSet from it once
# and refuses a later edit (reconcile._ran_spec compares the spec with the one the JobSet runs,
# and says what changed in the SpecChangeRejected condition). This transition rule refuses the
# edit at admission already. It sits on the whole object, the one place CEL sees the status: the
# run started when the JobSetCreated condition is True (before that, as for the operator, an edit
# may still fix a spec the operator refused). The operator's check stays as its twin: it also
# covers an edit in the moment between the JobSet's creation and the status saying so, an edit
# inside a free-form Kubernetes object (CEL compares only what the schema types: resources'
# quantities, affinity, a volume's source), and objects that never went through an API server.
IMMUTABLE_SPEC: dict[str, str] = {
    "rule": "self.spec == oldSelf.spec || !has(oldSelf.status) || "
    "!has(oldSelf.status.conditions) || !oldSelf.status.conditions.exists(c, "
    f"c.type == '{JOBSET_CREATED}' && c.status == 'True')",
    "message": "spec is immutable once the run started (condition JobSetCreated): the JobSet "
    "runs the spec it was created with; delete and re-create the benchmark to run another",
    "fieldPath": ".spec",
    "reason": "FieldValueForbidden",
}


def memory_problem(spec: Spec) -> str | None:
    """``resources.limits.memory`` below a rank's estimated peak, or None (no limit, forced).

    The estimate is the workload's own (``contract/checkpoint/memory_plan.py``), for the largest
    rank.
    """
    if not spec.memory_check or not spec.resources:
        return None
    quantity = (spec.resources.get("limits") or {}).get("memory")
    if quantity is None:
        return None
    try:
        limit = memory_plan.parse_quantity(str(quantity))
    except ValueError as exc:
        return f"resources.limits.memory: {exc}"
    config = spec.to_workload_config("check", "127.0.0.1")
    text = memory_plan.refusal(
        config.memory_estimate(),
        limit,
        f"resources.limits.memory {quantity}",
        "raise the limit, use more ranks (worldSize)"
        + (" or fewer layers" if spec.model is not None else " or a smaller layerSize"),
        "memoryCheck: false",
    )
    return None if text is None else f"resources.limits.memory: {text}"
