"""What keeps benchmark pods inside the "restricted" Pod Security profile and the admin's policy.

Whoever may create a CheckpointBenchmark gets pods made by the operator's service account, so the
pods run as the workload image's non-root user with a read-only root filesystem, no capabilities,
no privilege escalation and the runtime's default seccomp profile. Tolerations and priority
classes are a cluster admin's decision: the operator admits only those its chart values list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.names import TMP_PATH, TMP_VOLUME

# The USER of Dockerfile.workload (a test keeps the two equal). runAsNonRoot alone cannot check a
# user given by name, and the number makes files on shared volumes owned by one known user.
WORKLOAD_UID = 10001
WORKLOAD_GID = 10001


@dataclass(frozen=True)
class Policy:
    """What a cluster admin allows benchmarks beyond the restricted defaults (chart values
    ``workload.allowedTolerationKeys`` and ``workload.allowedPriorityClassNames``)."""

    toleration_keys: frozenset[str] = frozenset()
    priority_class_names: frozenset[str] = frozenset()


def policy_problems(spec: CheckpointBenchmarkSpec, policy: Policy) -> list[str]:
    """Why the admin's policy refuses ``spec``, one message per field; empty when it admits it."""
    problems = []
    for index, toleration in enumerate(spec.tolerations):
        key = toleration.get("key")
        if key not in policy.toleration_keys:
            problems.append(
                f"spec.tolerations[{index}].key: {key!r} is not allowed by the operator's policy "
                f"(allowed: {_listed(policy.toleration_keys)}; chart value "
                "workload.allowedTolerationKeys)"
            )
    name = spec.priority_class_name
    if name is not None and name not in policy.priority_class_names:
        problems.append(
            f"spec.priorityClassName: {name!r} is not allowed by the operator's policy "
            f"(allowed: {_listed(policy.priority_class_names)}; chart value "
            "workload.allowedPriorityClassNames)"
        )
    return problems


def _listed(names: frozenset[str]) -> str:
    return ", ".join(sorted(names)) or "none"


def _restricted(**between: Any) -> dict[str, Any]:
    """What the restricted Pod Security profile asks of a pod and of a container alike: a
    non-root user and the runtime's default seccomp profile; ``between`` goes between them."""
    return {
        "runAsNonRoot": True,
        "runAsUser": WORKLOAD_UID,
        **between,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security_context() -> dict[str, Any]:
    # Volumes (a shared PVC for backend file) become writable by the workload's group;
    # OnRootMismatch spares a large volume a recursive chown on every start.
    return _restricted(
        runAsGroup=WORKLOAD_GID, fsGroup=WORKLOAD_GID, fsGroupChangePolicy="OnRootMismatch"
    )


def container_security_context() -> dict[str, Any]:
    return _restricted(
        allowPrivilegeEscalation=False,
        readOnlyRootFilesystem=True,
        capabilities={"drop": ["ALL"]},
    )


def tmp_volume() -> dict[str, Any]:
    """Temporary files (Python's tempfile, torch) go here: the root filesystem is read-only."""
    return {"name": TMP_VOLUME, "emptyDir": {}}


def tmp_mount() -> dict[str, Any]:
    return {"name": TMP_VOLUME, "mountPath": TMP_PATH}
