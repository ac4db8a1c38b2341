"""The ids of the operator's kopf handlers and the names of its indexes never change.

kopf keeps a handler's progress in each object's annotations under the handler's id, and hands
each index to the handlers as a keyword argument named by the index's id: a renamed handler would
run again (or lose its retries) on every benchmark already in a cluster when the operator is
upgraded, and a renamed index would reach no handler. The registry is read in a fresh process that
imports the handler modules as ``main`` does, so no other test's registrations mix in.
"""

from __future__ import annotations

import json
import subprocess
import sys

_LIST_REGISTRY = """
import json
import kopf
from ckptbench.operator.runtime import handlers, sweep_handlers

registry = kopf.get_default_registry()
rows = []
for category in ("_activities", "_indexing", "_watching", "_changing"):
    for h in getattr(registry, category).get_all_handlers():
        selector = getattr(h, "selector", None)
        resource = "" if selector is None else f"{selector.group}/{selector.any_name}"
        labels = {k: str(v) for k, v in sorted((getattr(h, "labels", None) or {}).items())}
        # kopf registers a resume handler with no reason, as one run on the initial listing.
        initial = "resume" if getattr(h, "initial", None) else ""
        reason = str(getattr(h, "reason", None) or initial)
        rows.append([category.strip("_"), resource, h.id, reason, json.dumps(labels)])
print(json.dumps(rows))
"""

_MANAGED = '"app.kubernetes.io/managed-by": "ckptbench-operator"'
_BENCHMARK = '"ckptbench.dev/benchmark": "MetaFilterToken.PRESENT"'
CHECKPOINT_LABELS = f'{{{_MANAGED}, {_BENCHMARK}, "ckptbench.dev/kind": "MetaFilterToken.ABSENT"}}'
DATA_LABELS = f'{{{_MANAGED}, {_BENCHMARK}, "ckptbench.dev/kind": "DataLoadingBenchmark"}}'
SWEEP_LABELS = '{"ckptbench.dev/sweep": "MetaFilterToken.PRESENT"}'
CKB = "ckptbench.dev/checkpointbenchmarks"
DLB = "ckptbench.dev/dataloadingbenchmarks"
CKBS = "ckptbench.dev/checkpointbenchmarksweeps"
DLBS = "ckptbench.dev/dataloadingbenchmarksweeps"

# Recorded from the registrations as they were released: (category, resource, id, reason, labels).
EXPECTED = [
    ["activities", "", "login_via_client", "", "{}"],
    ["activities", "", "close-reconciler", "", "{}"],
    ["activities", "", "start_resync", "", "{}"],
    ["activities", "", "close-sweeps", "", "{}"],
    ["activities", "", "close-data_sweeps", "", "{}"],
    ["activities", "", "close-data_reconciler", "", "{}"],
    ["activities", "", "start_data_resync", "", "{}"],
    ["indexing", "/pods", "benchmark_pods", "", CHECKPOINT_LABELS],
    ["indexing", "/pods", "data_benchmark_pods", "", DATA_LABELS],
    ["watching", CKB, "benchmark_event", "", "{}"],
    ["watching", "jobset.x-k8s.io/jobsets", "jobset_event", "", CHECKPOINT_LABELS],
    ["watching", "/pods", "pod_event", "", CHECKPOINT_LABELS],
    ["watching", CKBS, "_register.<locals>.sweep_event", "", "{}"],
    ["watching", CKB, "_register.<locals>.sweep_child_event", "", SWEEP_LABELS],
    ["watching", DLBS, "_register.<locals>.sweep_event", "", "{}"],
    ["watching", DLB, "_register.<locals>.sweep_child_event", "", SWEEP_LABELS],
    ["watching", DLB, "data_benchmark_event", "", "{}"],
    ["watching", "jobset.x-k8s.io/jobsets", "data_jobset_event", "", DATA_LABELS],
    ["watching", "/pods", "data_pod_event", "", DATA_LABELS],
    ["changing", CKB, "benchmark_changed/spec", "update", "{}"],
    ["changing", CKB, "benchmark_changed", "create", "{}"],
    ["changing", CKB, "benchmark_changed", "resume", "{}"],
    ["changing", CKBS, "_register.<locals>.sweep_changed/spec", "update", "{}"],
    ["changing", CKBS, "_register.<locals>.sweep_changed", "create", "{}"],
    ["changing", CKBS, "_register.<locals>.sweep_changed", "resume", "{}"],
    ["changing", DLBS, "_register.<locals>.sweep_changed/spec", "update", "{}"],
    ["changing", DLBS, "_register.<locals>.sweep_changed", "create", "{}"],
    ["changing", DLBS, "_register.<locals>.sweep_changed", "resume", "{}"],
    ["changing", DLB, "data_benchmark_changed/spec", "update", "{}"],
    ["changing", DLB, "data_benchmark_changed", "create", "{}"],
    ["changing", DLB, "data_benchmark_changed", "resume", "{}"],
]


def _registered() -> list[list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _LIST_REGISTRY], capture_output=True, text=True, check=True
    )
    rows: list[list[str]] = json.loads(done.stdout)
    return rows


def test_handler_ids_index_names_resources_and_filters_are_the_released_ones() -> None:
    # Order aside (kopf keys progress by id, not by position), every registration is the same.
    assert sorted(_registered()) == sorted(EXPECTED)


def test_the_pod_indexes_keep_the_names_their_handlers_read() -> None:
    from ckptbench.operator.runtime import handlers

    indexes = {row[2] for row in _registered() if row[0] == "indexing"}
    assert indexes == {handlers.CHECKPOINT.pod_index, handlers.DATA.pod_index}
