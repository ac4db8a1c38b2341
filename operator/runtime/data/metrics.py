"""A DataLoadingBenchmark's Prometheus series, copied from its status.

Labels namespace, name, backend (the reader library); no rank label. Every value is the status's,
whose figures the workload's ``workload/contract/data/figures.py`` computed: nothing is computed
here, so a series reads what ``kubectl get dlb`` and ``ckptbench data`` show. One unit per family,
named by its suffix (counts and verdicts without one). A deleted benchmark's series are removed
with :func:`remove_benchmark`; they are kept apart from a CheckpointBenchmark's of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import Gauge

from ckptbench.operator.runtime.series import (
    REGISTRY,
    Key,
    Series,
    StatusPath,
    Value,
    at,
    drop,
    publish,
)
from ckptbench.operator.status.phases import PHASES

_LABELS = ("namespace", "name", "backend")

RANKS = Gauge(
    "ckptbench_data_ranks",
    "Ranks of the data-loading benchmark: expected (world size) and reported (results read).",
    (*_LABELS, "state"),
    registry=REGISTRY,
)
PHASE = Gauge(
    "ckptbench_data_phase",
    "1 for the data-loading benchmark's current phase, 0 for the others.",
    (*_LABELS, "phase"),
    registry=REGISTRY,
)
SAMPLES_PER_SECOND = Gauge(
    "ckptbench_data_samples_per_second",
    "Samples handed to the accelerators per second of the epochs, by statistic (value, and the "
    "95% interval's ci_low and ci_high).",
    (*_LABELS, "statistic"),
    registry=REGISTRY,
)
BYTES_PER_SECOND = Gauge(
    "ckptbench_data_bytes_per_second",
    "Sample bytes handed to the accelerators per second of the epochs, by statistic (value, and "
    "the 95% interval's ci_low and ci_high).",
    (*_LABELS, "statistic"),
    registry=REGISTRY,
)
AU = Gauge(
    "ckptbench_data_accelerator_utilization_ratio",
    "Accelerator utilisation (MLPerf Storage's AU: compute over loop seconds), by statistic: mean "
    "over the accelerators, its 95% interval (ci_low, ci_high), min (the lowest accelerator's), "
    "floor (the preset's, when it has one).",
    (*_LABELS, "statistic"),
    registry=REGISTRY,
)
AU_PASSED = Gauge(
    "ckptbench_data_au_passed",
    "1 when the mean accelerator utilisation is at or above the preset's floor, 0 when below; "
    "absent without a floor or without emulated compute.",
    _LABELS,
    registry=REGISTRY,
)
FIRST_BATCH = Gauge(
    "ckptbench_data_time_to_first_batch_seconds",
    "The longest wait of an accelerator for its first batch.",
    _LABELS,
    registry=REGISTRY,
)
BATCH_WAIT = Gauge(
    "ckptbench_data_batch_wait_seconds",
    "The accelerators' waits for a batch (the loader's stall on training), by statistic (p50, "
    "p90, p99 over every wait of every accelerator).",
    (*_LABELS, "statistic"),
    registry=REGISTRY,
)
SUSTAINED = Gauge(
    "ckptbench_data_sustained_accelerators",
    "The emulated accelerators the run kept at or above the AU floor (0: it did not).",
    _LABELS,
    registry=REGISTRY,
)
EPOCHS = Gauge(
    "ckptbench_data_epochs",
    "Epochs read.",
    _LABELS,
    registry=REGISTRY,
)

# Each family's series: (its labels after the benchmark's) -> the status keys down to the figure.
FIGURES: dict[Gauge, dict[tuple[str, ...], StatusPath]] = {
    RANKS: {("expected",): ("ranksExpected",), ("reported",): ("ranksReported",)},
    SAMPLES_PER_SECOND: {
        ("value",): ("samplesPerSecond",),
        ("ci_low",): ("samplesPerSecondInterval", "low"),
        ("ci_high",): ("samplesPerSecondInterval", "high"),
    },
    BYTES_PER_SECOND: {
        ("value",): ("bytesPerSecond",),
        ("ci_low",): ("bytesPerSecondInterval", "low"),
        ("ci_high",): ("bytesPerSecondInterval", "high"),
    },
    AU: {
        ("mean",): ("acceleratorUtilization",),
        ("ci_low",): ("acceleratorUtilizationInterval", "low"),
        ("ci_high",): ("acceleratorUtilizationInterval", "high"),
        ("min",): ("acceleratorUtilizationMin",),
        ("floor",): ("auFloor",),
    },
    AU_PASSED: {(): ("auPassed",)},
    FIRST_BATCH: {(): ("firstBatchSeconds",)},
    BATCH_WAIT: {
        ("p50",): ("waits", "p50Seconds"),
        ("p90",): ("waits", "p90Seconds"),
        ("p99",): ("waits", "p99Seconds"),
    },
    EPOCHS: {(): ("epochs", "count")},
}
_series: dict[Key, Series] = {}


def update_benchmark(namespace: str, name: str, backend: str, status: Mapping[str, Any]) -> None:
    """Set the benchmark's series from its status; series it no longer has are removed."""
    base = (namespace, name, backend)
    values: list[Value] = [
        (gauge, (*base, *labels), value)
        for gauge, paths in FIGURES.items()
        for labels, path in paths.items()
        if (value := at(status, path)) is not None
    ]
    current = status.get("phase")
    if current in PHASES:
        values += [(PHASE, (*base, p), 1.0 if p == current else 0.0) for p in PHASES]
    if status.get("auFloor") is not None and status.get("acceleratorUtilization") is not None:
        # The status leaves sustainedAccelerators out when none kept the floor: that is 0 here.
        sustained = at(status, ("sustainedAccelerators",)) or 0.0
        values.append((SUSTAINED, base, sustained))
    publish(_series, (namespace, name), values)


def remove_benchmark(namespace: str, name: str) -> None:
    """Remove every series of the benchmark (it was deleted)."""
    drop(_series, (namespace, name))
