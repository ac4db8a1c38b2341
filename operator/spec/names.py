"""The CheckpointBenchmark resource's identity, and the names and patterns its fields obey."""

from __future__ import annotations

import re
from typing import Literal

from ckptbench.workload.contract.state_settings import MAX_WORLD_SIZE

GROUP = "ckptbench.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "CheckpointBenchmark"
PLURAL = "checkpointbenchmarks"
SINGULAR = "checkpointbenchmark"
SHORT_NAME = "ckb"
CRD_NAME = f"{PLURAL}.{GROUP}"
# The workload image the chart gives the operator by default (values workload.image, with the
# chart's appVersion as its tag): what `ckptbench render` uses when told no other.
CHART_WORKLOAD_IMAGE = "ckptbench-workload:0.1.0"
# The service account the chart names for benchmark pods (values workloadServiceAccount.name),
# which its operator always allows: what `ckptbench render` allows when told no other.
CHART_WORKLOAD_SERVICE_ACCOUNT = "ckptbench-workload"

# The condition type that is True while the benchmark's JobSet exists: from then on the spec is
# the run's and cannot change (the CRD's immutability rule reads it; the status writes it).
JOBSET_CREATED = "JobSetCreated"

# Pods get the hostname `<name>-rank-0-<index>`, a DNS label (<= 63 characters).
REPLICATED_JOB = "rank"
_HOSTNAME_SUFFIX_LENGTH = len(f"-{REPLICATED_JOB}-0-") + len(str(MAX_WORLD_SIZE - 1))
MAX_NAME_LENGTH = 63 - _HOSTNAME_SUFFIX_LENGTH
# The name is also the headless Service's name, which must be a DNS-1035 label.
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

# A bound on the whole checkpoint, so a typo in layerSize cannot ask a cluster for petabytes.
MAX_TOTAL_BYTES = 64 * 1024**4
MAX_LIST_ITEMS = 64

# What a benchmark's pods may mount: the kinds a benchmark needs, each allowed by the "restricted"
# Pod Security profile. hostPath, projected (service-account tokens), ephemeral and the rest are
# refused: whoever may create a benchmark must not get through it what their RBAC denies them.
VOLUME_SOURCES: tuple[str, ...] = (
    "persistentVolumeClaim",
    "csi",
    "emptyDir",
    "configMap",
    "secret",
)
VOLUME_KEYS: tuple[str, ...] = ("name", *VOLUME_SOURCES)
# mountPropagation is left out: Bidirectional needs a privileged container.
VOLUME_MOUNT_KEYS: tuple[str, ...] = ("name", "mountPath", "readOnly", "subPath", "subPathExpr")
TOLERATION_KEYS: tuple[str, ...] = ("key", "operator", "value", "effect", "tolerationSeconds")
TOLERATION_OPERATORS: tuple[str, ...] = ("Equal", "Exists")
TAINT_EFFECTS: tuple[str, ...] = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# The root filesystem of a rank is read-only; the operator mounts an emptyDir here for temporary
# files, so a benchmark may neither name a volume like it nor mount over it.
TMP_VOLUME = "ckptbench-tmp"
TMP_PATH = "/tmp"
# Labels and taints of control-plane nodes: benchmark pods have no business there.
CONTROL_PLANE_KEYS: tuple[str, ...] = (
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
)
# PriorityClasses named system-* (system-node-critical, system-cluster-critical) are for
# components the cluster cannot run without; a benchmark could evict them.
SYSTEM_PRIORITY_PREFIX = "system-"

ImagePullPolicy = Literal["Always", "IfNotPresent", "Never"]
IMAGE_PULL_POLICIES: tuple[str, ...] = ("Always", "IfNotPresent", "Never")

# An absolute path, or a '..' step anywhere in a relative one (RE2 and Python read it alike): a
# mount's subPath or a projected file's path must stay inside its volume.
PARENT_STEP = r"^/|(^|/)\.\.(/|$)"

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def validate_name(name: str) -> str | None:
    """Why ``name`` cannot name a benchmark, or None when it can.

    The CRD schema cannot constrain ``metadata.name`` (a CEL rule on the CRD does, for API
    servers that evaluate it); the operator checks again with this before rendering anything.
    """
    if not isinstance(name, str) or not name:
        return "metadata.name: must be a non-empty string"
    if len(name) > MAX_NAME_LENGTH:
        return (
            f"metadata.name: {len(name)} characters is too long; at most {MAX_NAME_LENGTH} so that "
            f"pod hostnames <name>-{REPLICATED_JOB}-0-<index> stay within 63"
        )
    if not re.fullmatch(NAME_PATTERN, name):
        return (
            f"metadata.name: {name!r} must be a DNS-1035 label (lowercase letters, digits and '-', "
            "starting with a letter): it names the JobSet's headless Service"
        )
    return None


def check_dns_label(name: object, where: str) -> None:
    if not isinstance(name, str) or len(name) > 63 or not re.fullmatch(DNS_LABEL, name):
        raise ValueError(
            f"{where}: must be a DNS label (lowercase, <= 63 characters), got {name!r}"
        )
