"""What a result depends on: software versions, the node, its CPUs, and the settings used."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
from typing import Any

from ckptbench.workload.contract.config import WorkloadConfig

_PACKAGES = ("torch", "gcsfs", "google-cloud-storage", "fsspec", "ckptbench")


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_count() -> int:
    """CPUs this process may run on (a container's cpuset), not the host's total."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def node_name() -> str:
    # In a pod the downward API puts the node's name in NODE_NAME; the hostname is the pod's.
    return os.environ.get("NODE_NAME") or socket.gethostname()


def describe(config: WorkloadConfig) -> dict[str, Any]:
    versions = {"python": platform.python_version()}
    versions.update({name: package_version(name) or "not installed" for name in _PACKAGES})
    return {
        "versions": versions,
        "node": node_name(),
        "host": socket.gethostname(),
        "cpu_count": cpu_count(),
        "settings": config.model_dump(mode="json", exclude={"rank"}),
    }
