"""The operator's Prometheus metrics: a CheckpointBenchmark's, a sweep's and the reconciles'.

Per benchmark: labels namespace, name, backend; no rank label (cardinality grows with world size).
A deleted benchmark's series are removed with :func:`remove_benchmark`. Every value is copied from
the status, whose figures the workload's contract computed
(``workload/contract/results/figures.py``): nothing is computed here, so a series reads what
``kubectl get`` and ``ckptbench run`` show. The one exception is a sweep cell's throughput: the
sweep's status keeps only GiB/s to four significant digits, so that series is converted back from it
and is that precise.

One unit per family, named by its suffix (``_seconds``, ``_bytes``, ``_bytes_per_second``,
``_ratio``; counts without one): a label never switches a family between seconds and bytes, so
``sum``/``max`` over a family's series, and a panel's unit, are always right.

The registry and the series bookkeeping are :mod:`.series`'s, shared with the DataLoadingBenchmark's
series (:mod:`.data.metrics`), which this module imports so that :func:`metric_names` names them.
A benchmark's series of both demands at once (``status.both``) are :mod:`.data.both_metrics`'s
families, set and removed here with the benchmark's others.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from ckptbench.operator.runtime.data import both_metrics
from ckptbench.operator.runtime.data import metrics as data_metrics  # noqa: F401 (its families)
from ckptbench.operator.runtime.series import (
    REGISTRY,
    Key,
    Series,
    StatusPath,
    Value,
    at,
    drop,
    number,
    publish,
)
from ckptbench.operator.status.phases import PHASES

_LABELS = ("namespace", "name", "backend")
OPERATIONS = ("save", "load", "delete")  # delete: absent when checkpoints are kept
_SWEEP_OPERATIONS = ("save", "load")  # a sweep's cells keep save and load throughputs only
# p99 only when the status has one (enough samples: stats.P99_MIN_SAMPLES).
STATISTICS = {
    "mean": "meanSeconds",
    "p50": "p50Seconds",
    "p90": "p90Seconds",
    "p99": "p99Seconds",
    "max": "maxSeconds",
}
# Per-rank figures without a rank label (its cardinality would grow with the world size).
PARTS = {
    "planning": "planningSeconds",
    "io_slowest_rank": "slowestRankSeconds",
    "io_fastest_rank": "fastestRankSeconds",
    "collective_overhead": "collectiveOverheadSeconds",
}
THROUGHPUTS = {
    "aggregate": "throughputBytesPerSecond",
    "min_rank": "minRankThroughputBytesPerSecond",
}

CHECKPOINT_BYTES = Gauge(
    "ckptbench_benchmark_checkpoint_bytes",
    "Bytes in one checkpoint of the benchmark (all ranks).",
    _LABELS,
    registry=REGISTRY,
)
RANKS = Gauge(
    "ckptbench_benchmark_ranks",
    "Ranks of the benchmark: expected (world size, or load world size when larger) and reported "
    "(results read).",
    (*_LABELS, "state"),
    registry=REGISTRY,
)
PHASE = Gauge(
    "ckptbench_benchmark_phase",
    "1 for the benchmark's current phase, 0 for the others.",
    (*_LABELS, "phase"),
    registry=REGISTRY,
)
DURATION = Gauge(
    "ckptbench_benchmark_duration_seconds",
    "Collective duration of a checkpoint operation (save, load, delete; max over ranks per "
    "sample), by statistic.",
    (*_LABELS, "operation", "statistic"),
    registry=REGISTRY,
)
THROUGHPUT = Gauge(
    "ckptbench_benchmark_throughput_bytes_per_second",
    "Checkpoint throughput: aggregate (total bytes / mean duration) or the slowest rank's own.",
    (*_LABELS, "operation", "kind"),
    registry=REGISTRY,
)
PART_SECONDS = Gauge(
    "ckptbench_benchmark_operation_part_seconds",
    "A checkpoint operation's parts, timed inside the storage layer: planning, the I/O seconds "
    "of the slowest and of the fastest rank, and the collective overhead. (Not the benchmark's "
    "lifecycle phase: that is ckptbench_benchmark_phase.)",
    (*_LABELS, "operation", "part"),
    registry=REGISTRY,
)
READ_AMPLIFICATION = Gauge(
    "ckptbench_benchmark_read_amplification_ratio",
    "A load's bytes read from storage over the stored bytes its plans needed: over every rank "
    "(aggregate) or the largest rank's (max_rank).",
    (*_LABELS, "kind"),
    registry=REGISTRY,
)
AMPLIFICATIONS = {
    "aggregate": "readAmplification",
    "max_rank": "maxRankReadAmplification",
}
# What the ranks' processes used while benchmarking, one family per unit: CPU seconds and network
# bytes, each by statistic: the largest per rank (max), the total over ranks (total, traffic
# only) and the slowest rank's own (slowest_rank).
RANK_CPU = Gauge(
    "ckptbench_benchmark_rank_cpu_seconds",
    "CPU seconds a rank's process used while benchmarking, by mode (user, system) and statistic "
    "(max: the largest per rank; slowest_rank: the slowest rank's own).",
    (*_LABELS, "mode", "statistic"),
    registry=REGISTRY,
)
RANK_NETWORK = Gauge(
    "ckptbench_benchmark_rank_network_bytes",
    "Bytes a rank's process sent or received while benchmarking, by direction and statistic "
    "(max: the largest per rank; total: summed over ranks; slowest_rank: the slowest rank's own).",
    (*_LABELS, "direction", "statistic"),
    registry=REGISTRY,
)
_SLOWEST = "slowestRankResources"
# Labels after the benchmark's -> the status keys down to the figure.
RANK_RESOURCES: dict[Gauge, dict[tuple[str, str], StatusPath]] = {
    RANK_CPU: {
        ("user", "max"): ("resources", "maxCpuUserSeconds"),
        ("system", "max"): ("resources", "maxCpuSystemSeconds"),
        ("user", "slowest_rank"): ("resources", _SLOWEST, "cpuUserSeconds"),
        ("system", "slowest_rank"): ("resources", _SLOWEST, "cpuSystemSeconds"),
    },
    RANK_NETWORK: {
        ("sent", "max"): ("resources", "maxSentBytes"),
        ("received", "max"): ("resources", "maxReceivedBytes"),
        ("sent", "total"): ("resources", "sentBytes"),
        ("received", "total"): ("resources", "receivedBytes"),
        ("sent", "slowest_rank"): ("resources", _SLOWEST, "sentBytes"),
        ("received", "slowest_rank"): ("resources", _SLOWEST, "receivedBytes"),
    },
}

ASYNC_SECONDS = Gauge(
    "ckptbench_benchmark_async_seconds",
    "Async save, per rank then across ranks: the stall (the call until it returns), staging "
    "(the copy, when apart from the call) and background (return until durable); statistic mean "
    "(over ranks) or slowest_rank.",
    (*_LABELS, "figure", "statistic"),
    registry=REGISTRY,
)
TRAIN_SECONDS = Gauge(
    "ckptbench_benchmark_train_seconds",
    "The training step beside the saves: step (without checkpointing), step_in_flight (a save "
    "uploading), and per interval wait (for the previous save) and stall (the slowest rank's).",
    (*_LABELS, "figure"),
    registry=REGISTRY,
)
CHECKPOINT_OVERHEAD = Gauge(
    "ckptbench_benchmark_checkpoint_overhead_ratio",
    "Overhead per checkpoint interval, (wait + stall + extra step time) / (K x step time): the "
    "slowest rank's mean, the mean over ranks, the largest interval (CheckFreq's bar: 0.035).",
    (*_LABELS, "statistic"),
    registry=REGISTRY,
)
PEAK_RSS = Gauge(
    "ckptbench_benchmark_peak_rss_bytes",
    "Peak resident memory of a rank's process or of its checkpointer process, by statistic (max: "
    "the largest over ranks; slowest_rank: the slowest rank's own, rank processes only).",
    (*_LABELS, "process", "statistic"),
    registry=REGISTRY,
)
# Status key of each async figure and training figure.
ASYNC_FIGURES = {"stall": "stall", "staging": "staging", "background": "background"}
ASYNC_STATISTICS = {"mean": "meanSeconds", "slowest_rank": "slowestRankSeconds"}
TRAIN_FIGURES = {"step": "stepSeconds", "step_in_flight": "inFlightStepSeconds"}
OVERHEADS = {"slowest_rank": "overhead", "rank_mean": "overheadRankMean", "max": "overheadMax"}
# (process, statistic) -> the status keys down to the figure. The largest peak RSS of a rank's
# process is the resources block's; the checkpointer's is the status' own.
PEAKS: dict[tuple[str, str], StatusPath] = {
    ("rank", "max"): ("resources", "maxPeakRssBytes"),
    ("rank", "slowest_rank"): ("resources", _SLOWEST, "peakRssBytes"),
    ("checkpointer", "max"): ("checkpointerPeakRssBytes",),
}
SWEEP_CELL_THROUGHPUT = Gauge(
    "ckptbench_sweep_cell_throughput_bytes_per_second",
    "Aggregate throughput of each succeeded cell of a sweep (its child benchmark's), to compare "
    "cells side by side.",
    ("namespace", "sweep", "cell", "operation"),
    registry=REGISTRY,
)
SWEEP_CELLS = Gauge(
    "ckptbench_sweep_cells",
    "Cells of a sweep by state: total, done, succeeded, failed.",
    ("namespace", "sweep", "state"),
    registry=REGISTRY,
)
RECONCILES = Counter(
    "ckptbench_operator_reconciles_total",
    "Reconciles run by the operator, by handler.",
    ("handler",),
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "ckptbench_operator_reconcile_errors_total",
    "Reconciles that raised, by handler.",
    ("handler",),
    registry=REGISTRY,
)
RECONCILE_DURATION = Histogram(
    "ckptbench_operator_reconcile_duration_seconds",
    "Wall time of one reconcile, by handler.",
    ("handler",),
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=REGISTRY,
)

# The handlers that count reconciles: each counter starts at 0, so a dashboard shows "0 errors"
# rather than "No data" until the first one.
_BENCHMARK_HANDLERS = ("create", "resume", "update", "jobset", "pod", "resync")
HANDLERS = (
    *_BENCHMARK_HANDLERS,
    *("sweep-create", "sweep-resume", "sweep-update", "sweep-child"),
    *(f"data-{handler}" for handler in _BENCHMARK_HANDLERS),  # DataLoadingBenchmarks'
)
for _handler in HANDLERS:
    RECONCILES.labels(_handler)
    RECONCILE_ERRORS.labels(_handler)

_BENCHMARK_GAUGES: tuple[Gauge, ...] = (
    *(CHECKPOINT_BYTES, RANKS, PHASE, DURATION, THROUGHPUT, PART_SECONDS, READ_AMPLIFICATION),
    *(RANK_CPU, RANK_NETWORK, ASYNC_SECONDS, TRAIN_SECONDS, CHECKPOINT_OVERHEAD, PEAK_RSS),
    *both_metrics.GAUGES,  # both demands at once (dataLoading set)
)
# Which label values each benchmark has series under, so removal takes away exactly those.
_series: dict[Key, Series] = {}


def metric_names() -> list[str]:
    """Every series name PromQL can query: gauges as named, counters with ``_total``, histograms
    with ``_bucket``, ``_sum`` and ``_count`` (and their base names, as the contract lists them)."""
    names: set[str] = set()
    for metric in REGISTRY.collect():
        if metric.type == "counter":
            names.add(metric.name + "_total")
        elif metric.type == "histogram":
            names.add(metric.name)
            names.update(metric.name + suffix for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.add(metric.name)
    return sorted(names)


def update_benchmark(namespace: str, name: str, backend: str, status: Mapping[str, Any]) -> None:
    """Set the benchmark's series from its status; series it no longer has are removed."""
    base = (namespace, name, backend)
    values: list[Value] = []
    if isinstance(status.get("checkpointBytes"), int):
        values.append((CHECKPOINT_BYTES, base, float(status["checkpointBytes"])))
    for state, key in (("expected", "ranksExpected"), ("reported", "ranksReported")):
        if isinstance(status.get(key), int):
            values.append((RANKS, (*base, state), float(status[key])))
    current = status.get("phase")
    if current in PHASES:
        values += [(PHASE, (*base, p), 1.0 if p == current else 0.0) for p in PHASES]
    for operation in OPERATIONS:
        op = status.get(operation)
        if not isinstance(op, Mapping):
            continue
        for gauge, keys in (
            (DURATION, STATISTICS),
            (THROUGHPUT, THROUGHPUTS),
            (PART_SECONDS, PARTS),
        ):
            for label, key in keys.items():
                if isinstance(op.get(key), int | float):
                    values.append((gauge, (*base, operation, label), float(op[key])))
    values += _read_amplification(base, status)
    values += _resources(base, status)
    values += _async_values(base, status) + _train_values(base, status)
    values += both_metrics.values(base, status)
    for labels, path in PEAKS.items():
        if (value := at(status, path)) is not None:
            values.append((PEAK_RSS, (*base, *labels), value))
    publish(_series, (namespace, name), values)


def _read_amplification(base: tuple[str, ...], status: Mapping[str, Any]) -> list[Value]:
    load = status.get("load")
    if not isinstance(load, Mapping):
        return []
    return [
        (READ_AMPLIFICATION, (*base, kind), float(load[key]))
        for kind, key in AMPLIFICATIONS.items()
        if isinstance(load.get(key), int | float)
    ]


def _resources(base: tuple[str, ...], status: Mapping[str, Any]) -> list[Value]:
    return [
        (gauge, (*base, *labels), value)
        for gauge, paths in RANK_RESOURCES.items()
        for labels, path in paths.items()
        if (value := at(status, path)) is not None
    ]


def _async_values(base: tuple[str, ...], status: Mapping[str, Any]) -> list[Value]:
    save = status.get("save")
    values: list[Value] = []
    for label, key in ASYNC_FIGURES.items():
        figure = save.get(key) if isinstance(save, Mapping) else None
        for statistic, stat_key in ASYNC_STATISTICS.items():
            if (value := number(figure, stat_key)) is not None:
                values.append((ASYNC_SECONDS, (*base, label, statistic), value))
    return values


def _train_values(base: tuple[str, ...], status: Mapping[str, Any]) -> list[Value]:
    train = status.get("train")
    if not isinstance(train, Mapping):
        return []
    values: list[Value] = []
    for label, key in TRAIN_FIGURES.items():
        if (value := number(train, key)) is not None:
            values.append((TRAIN_SECONDS, (*base, label), value))
    for label in ("wait", "stall"):
        if (value := number(train.get(label), "slowestRankSeconds")) is not None:
            values.append((TRAIN_SECONDS, (*base, label), value))
    for statistic, key in OVERHEADS.items():
        if (value := number(train, key)) is not None:
            values.append((CHECKPOINT_OVERHEAD, (*base, statistic), value))
    return values


def remove_benchmark(namespace: str, name: str) -> None:
    """Remove every series of the benchmark (it was deleted)."""
    drop(_series, (namespace, name))


_SWEEP_COUNTS = {
    "total": "cellsTotal",
    "done": "cellsDone",
    "succeeded": "cellsSucceeded",
    "failed": "cellsFailed",
}
_sweep_series: dict[Key, Series] = {}


def update_sweep(namespace: str, sweep: str, status: Mapping[str, Any]) -> None:
    """Set a sweep's series from its status: cell counts and each succeeded cell's throughput."""
    values: list[Value] = []
    for state, key in _SWEEP_COUNTS.items():
        if isinstance(status.get(key), int):
            values.append((SWEEP_CELLS, (namespace, sweep, state), float(status[key])))
    for row in status.get("cells") or []:
        if not isinstance(row, Mapping) or row.get("phase") != "Succeeded":
            continue
        for operation in _SWEEP_OPERATIONS:
            rate = row.get(f"{operation}GiBps")
            if isinstance(rate, int | float):
                cell = (namespace, sweep, str(row.get("cell")), operation)
                values.append((SWEEP_CELL_THROUGHPUT, cell, float(rate) * 1024**3))
    publish(_sweep_series, (namespace, sweep), values)


def remove_sweep(namespace: str, sweep: str) -> None:
    drop(_sweep_series, (namespace, sweep))


@contextmanager
def observe_reconcile(handler: str) -> Iterator[None]:
    """Count and time one reconcile; an exception is counted as an error and re-raised."""
    RECONCILES.labels(handler).inc()
    with RECONCILE_DURATION.labels(handler).time():
        try:
            yield
        except Exception:
            RECONCILE_ERRORS.labels(handler).inc()
            raise


def serve(port: int, addr: str = "0.0.0.0") -> Any:
    """Serve /metrics of :data:`REGISTRY` in a background thread; returns (server, thread)."""
    return start_http_server(port, addr, registry=REGISTRY)


__all__ = [
    "REGISTRY",
    "metric_names",
    "observe_reconcile",
    "remove_benchmark",
    "remove_sweep",
    "serve",
    "update_benchmark",
    "update_sweep",
]
