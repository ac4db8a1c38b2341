"""The DataLoadingBenchmark resource's identity: the CheckpointBenchmark's group and version, its
own kind. Names, patterns and bounds its fields obey are the CheckpointBenchmark's
(``operator/spec/names.py``): both run as the same JobSet of ranks."""

from __future__ import annotations

from ckptbench.operator.spec.names import GROUP

KIND = "DataLoadingBenchmark"
PLURAL = "dataloadingbenchmarks"
SINGULAR = "dataloadingbenchmark"
SHORT_NAME = "dlb"
CRD_NAME = f"{PLURAL}.{GROUP}"

# The rank's entry point in the workload image (workload/rank/data/worker.py).
WORKER_COMMAND = ("ckptbench", "data-worker")
