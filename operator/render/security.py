"""What keeps benchmark pods inside the "restricted" Pod Security profile and the admin's policy.

Whoever may create a CheckpointBenchmark gets pods made by the operator's service account, so the
pods run as the workload image's non-root user with a read-only root filesystem, no capabilities,
no privilege escalation and the runtime's default seccomp profile. Images, service accounts,
Secrets, tolerations and priority classes are a cluster admin's decision: the operator admits
only those its chart values list (:class:`~ckptbench.operator.spec.policy.Policy`).
"""

from __future__ import annotations

from typing import Any

from ckptbench.operator.spec.names import TMP_PATH, TMP_VOLUME

# The USER of Dockerfile.workload (a test keeps the two equal). runAsNonRoot alone cannot check a
# user given by name, and the number makes files on shared volumes owned by one known user.
WORKLOAD_UID = 10001
WORKLOAD_GID = 10001


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
