"""Names, labels and annotations of what the operator creates for a benchmark.

The runtime selects and watches by these; rendering puts them on the JobSet and its pods.
"""

from __future__ import annotations

from typing import Any

from ckptbench.operator.spec.names import API_VERSION, KIND, REPLICATED_JOB

JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_KIND = "JobSet"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_BENCHMARK = "ckptbench.dev/benchmark"
# On what is rendered for a kind other than CheckpointBenchmark (the DataLoadingBenchmark): its
# kind, so a watch can tell whose pods it sees. A CheckpointBenchmark's objects carry none, as
# they always have.
LABEL_KIND = "ckptbench.dev/kind"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
SPEC_HASH_ANNOTATION = "ckptbench.dev/spec-hash"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

APP_NAME = "ckptbench"
MANAGED_BY = "ckptbench-operator"


def jobset_name(name: str) -> str:
    """The JobSet of benchmark ``name`` (also its headless Service and pods' subdomain)."""
    return name


def benchmark_labels(name: str) -> dict[str, str]:
    """Labels on everything rendered for benchmark ``name``; watches select pods by them."""
    return {LABEL_NAME: APP_NAME, LABEL_MANAGED_BY: MANAGED_BY, LABEL_BENCHMARK: name}


def benchmark_selector(name: str) -> str:
    """A label selector string matching the pods and JobSet of benchmark ``name``."""
    return ",".join(f"{key}={value}" for key, value in benchmark_labels(name).items())


def master_addr(name: str, namespace: str) -> str:
    """Rank 0's fully qualified host name: short names do not resolve across namespaces."""
    jobset = jobset_name(name)
    return f"{jobset}-{REPLICATED_JOB}-0-0.{jobset}.{namespace}.svc"


def run_id(name: str, uid: str) -> str:
    """The run's folder under checkpointPath: stable per benchmark, fresh when it is recreated."""
    return f"{name}-{uid}"


def owner_reference(name: str, uid: str, kind: str = KIND) -> dict[str, Any]:
    """The reference to benchmark ``name`` of ``kind`` (every kind is in one API group)."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
