"""Operator metrics: contract names and labels, series follow the status, deletion removes them."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from ckptbench.operator.runtime import metrics
from ckptbench.operator.runtime.data import metrics as data_metrics

ROOT = Path(__file__).resolve().parents[1]

CONTRACT_NAMES = {
    "ckptbench_benchmark_checkpoint_bytes",
    "ckptbench_benchmark_ranks",
    "ckptbench_benchmark_phase",
    "ckptbench_benchmark_duration_seconds",
    "ckptbench_benchmark_throughput_bytes_per_second",
    "ckptbench_benchmark_operation_part_seconds",
    "ckptbench_operator_reconciles_total",
    "ckptbench_operator_reconcile_errors_total",
    "ckptbench_operator_reconcile_duration_seconds",
    *("ckptbench_data_ranks", "ckptbench_data_phase", "ckptbench_data_samples_per_second"),
    *("ckptbench_data_bytes_per_second", "ckptbench_data_accelerator_utilization_ratio"),
    *("ckptbench_data_au_passed", "ckptbench_data_time_to_first_batch_seconds"),
    *("ckptbench_data_batch_wait_seconds", "ckptbench_data_sustained_accelerators"),
    "ckptbench_data_epochs",
    *("ckptbench_both_slowdown_ratio", "ckptbench_both_samples_per_second"),
    *("ckptbench_both_accelerator_utilization_ratio", "ckptbench_both_seconds"),
}

OP = {
    "meanSeconds": 2.0,
    "p50Seconds": 1.5,
    "p90Seconds": 3.0,
    "maxSeconds": 4.0,
    "throughputBytesPerSecond": 100.0,
    "minRankThroughputBytesPerSecond": 20.0,
    "planningSeconds": 0.25,
    "slowestRankSeconds": 1.5,
    "fastestRankSeconds": 0.5,
    "collectiveOverheadSeconds": 0.25,
}
SUCCEEDED = {
    "phase": "Succeeded",
    "checkpointBytes": 200,
    "ranksExpected": 4,
    "ranksReported": 4,
    "save": OP,
    "load": {**OP, "meanSeconds": 1.0},
}


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    yield
    for key in list(metrics._series):
        metrics.remove_benchmark(*key)
    for key in list(data_metrics._series):
        data_metrics.remove_benchmark(*key)


def value(metric: str, /, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(metric, labels)


def base(name: str = "b1", backend: str = "gcs") -> dict[str, str]:
    return {"namespace": "ns", "name": name, "backend": backend}


def test_metric_names_cover_the_contract() -> None:
    assert set(metrics.metric_names()) >= CONTRACT_NAMES
    assert "ckptbench_operator_reconcile_duration_seconds_bucket" in metrics.metric_names()


@pytest.mark.parametrize(
    ("name", "labels", "expected"),
    [
        # Each name after "ckptbench_benchmark_".
        ("checkpoint_bytes", {}, 200.0),
        ("ranks", {"state": "expected"}, 4.0),
        ("ranks", {"state": "reported"}, 4.0),
        ("phase", {"phase": "Succeeded"}, 1.0),
        ("phase", {"phase": "Running"}, 0.0),
        ("duration_seconds", {"operation": "save", "statistic": "mean"}, 2.0),
        ("duration_seconds", {"operation": "save", "statistic": "p50"}, 1.5),
        ("duration_seconds", {"operation": "save", "statistic": "p90"}, 3.0),
        ("duration_seconds", {"operation": "load", "statistic": "mean"}, 1.0),
        ("duration_seconds", {"operation": "load", "statistic": "max"}, 4.0),
        ("throughput_bytes_per_second", {"operation": "save", "kind": "aggregate"}, 100.0),
        ("throughput_bytes_per_second", {"operation": "load", "kind": "min_rank"}, 20.0),
        ("operation_part_seconds", {"operation": "save", "part": "planning"}, 0.25),
        ("operation_part_seconds", {"operation": "save", "part": "io_slowest_rank"}, 1.5),
        ("operation_part_seconds", {"operation": "load", "part": "io_fastest_rank"}, 0.5),
        ("operation_part_seconds", {"operation": "load", "part": "collective_overhead"}, 0.25),
    ],
)
def test_update_sets_series(name: str, labels: dict[str, str], expected: float) -> None:
    metrics.update_benchmark("ns", "b1", "gcs", SUCCEEDED)
    assert value(f"ckptbench_benchmark_{name}", **base(), **labels) == expected


def test_remove_takes_every_series_away_and_keeps_others() -> None:
    metrics.update_benchmark("ns", "b1", "gcs", SUCCEEDED)
    metrics.update_benchmark("ns", "b2", "gcsfs", SUCCEEDED)
    metrics.remove_benchmark("ns", "b1")
    text = generate_latest(metrics.REGISTRY).decode()
    assert 'name="b1"' not in text
    assert 'name="b2"' in text
    metrics.remove_benchmark("ns", "b1")  # twice is harmless


@pytest.mark.parametrize(
    ("before", "after", "gone"),
    [
        (
            SUCCEEDED,
            {"phase": "Running", "ranksExpected": 4},
            "ckptbench_benchmark_checkpoint_bytes",
        ),
        (SUCCEEDED, {**SUCCEEDED, "load": None}, "ckptbench_benchmark_duration_seconds"),
    ],
)
def test_series_the_status_no_longer_has_are_removed(
    before: dict[str, Any], after: dict[str, Any], gone: str
) -> None:
    metrics.update_benchmark("ns", "b1", "gcs", before)
    metrics.update_benchmark("ns", "b1", "gcs", after)
    labels = {"operation": "load", "statistic": "mean"} if "duration" in gone else {}
    assert value(gone, **base(), **labels) is None


def test_backend_change_leaves_no_stale_series() -> None:
    metrics.update_benchmark("ns", "b1", "gcs", SUCCEEDED)
    metrics.update_benchmark("ns", "b1", "file", SUCCEEDED)
    assert value("ckptbench_benchmark_checkpoint_bytes", **base()) is None
    assert value("ckptbench_benchmark_checkpoint_bytes", **base(backend="file")) == 200.0


def test_observe_reconcile_counts_errors() -> None:
    def count(name: str) -> float:
        return value(name, handler="unit") or 0.0

    runs, errors = (
        count("ckptbench_operator_reconciles_total"),
        count("ckptbench_operator_reconcile_errors_total"),
    )
    with metrics.observe_reconcile("unit"):
        pass
    with pytest.raises(RuntimeError), metrics.observe_reconcile("unit"):
        raise RuntimeError("boom")
    assert count("ckptbench_operator_reconciles_total") == runs + 2
    assert count("ckptbench_operator_reconcile_errors_total") == errors + 1
    assert count("ckptbench_operator_reconcile_duration_seconds_count") >= 2


def test_serve_exposes_the_dedicated_registry() -> None:
    metrics.update_benchmark("ns", "served", "gcs", SUCCEEDED)
    server, thread = metrics.serve(0, "127.0.0.1")
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
        assert 'ckptbench_benchmark_checkpoint_bytes{backend="gcs",name="served"' in text
        assert "python_gc_objects_collected_total" not in text  # not the global registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_reconcile_counters_start_at_zero_for_every_handler() -> None:
    # A dashboard panel on errors shows 0, not "No data", until the first error.
    text = generate_latest(metrics.REGISTRY).decode()
    for handler in metrics.HANDLERS:
        assert f'ckptbench_operator_reconcile_errors_total{{handler="{handler}"}}' in text
        assert f'ckptbench_operator_reconciles_total{{handler="{handler}"}}' in text


SCRAPE_IN_A_FRESH_PROCESS = """
import urllib.request
from ckptbench.operator.runtime import metrics
with metrics.observe_reconcile("create"):
    pass
metrics.update_benchmark("ns", "b", "gcs", {"phase": "Succeeded", "checkpointBytes": 1})
server, thread = metrics.serve(0, "127.0.0.1")
url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
with urllib.request.urlopen(url, timeout=5) as response:
    print(response.read().decode())
server.shutdown()
"""


def test_a_scrape_has_no_created_series() -> None:
    """prometheus_client adds a ``_created`` series to every counter and histogram child unless
    told not to. A fresh process, without PROMETHEUS_DISABLE_CREATED_SERIES in its environment,
    so only the operator's own switch can keep them out."""
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_DISABLE_CREATED_SERIES"}
    result = subprocess.run(
        [sys.executable, "-c", SCRAPE_IN_A_FRESH_PROCESS],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,  # imports this checkout's ckptbench
        env=env,
    )
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert 'ckptbench_operator_reconciles_total{handler="create"} 1.0' in text
    assert "ckptbench_operator_reconcile_duration_seconds_count" in text
    created = [line for line in text.splitlines() if "_created" in line]
    assert created == [], created


def _async_trained_status() -> dict[str, Any]:
    """A status as the operator writes it, from ranks that saved async beside a training step."""
    from ckptbench.operator.spec.status_schema import (
        BenchmarkStatus,
        Resources,
        Training,
        status_body,
    )
    from ckptbench.operator.status.aggregate import operation
    from ckptbench.workload.contract.results.figures import summarize
    from ckptbench.workload.contract.results.rank import (
        OpStats,
        OpTiming,
        RankResources,
        RankResult,
        TrainTiming,
    )

    def rank(n: int, stall: float, overhead: float) -> RankResult:
        save = OpTiming.of([2.0], [1.5], blocked_seconds=[stall], background_seconds=[1.75])
        train = TrainTiming(
            every=10, matrix=512, step_threads=1, cpus=2, step=OpStats.of([0.1, 0.1]),
            in_flight_step=OpStats.of([0.125]), in_flight_steps=9, wait=OpStats.of([0.5]),
            stall=OpStats.of([stall]), overhead=OpStats.of([overhead]),
        )  # fmt: skip
        load = OpTiming.of([1.0], [1.0])
        return RankResult(
            rank=n, bytes=10, save=save, load=load, train=train, checkpointer_peak_rss_bytes=500,
            resources=RankResources(
                cpu_user_seconds=1, cpu_system_seconds=1, peak_rss_bytes=1000 + n, sent_bytes=0,
                received_bytes=0,
            ),
        )  # fmt: skip

    s = summarize([rank(0, 0.25, 0.5), rank(1, 0.75, 0.25)], world_size=2, total_bytes=20)
    assert s.save is not None and s.train is not None and s.resources is not None
    status = BenchmarkStatus(
        phase="Succeeded",
        save=operation(s.save, {}),
        train=Training.of(s.train),
        resources=Resources.model_validate(s.resources.model_dump()),
        checkpointer_peak_rss_bytes=s.checkpointer_peak_rss_bytes,
    )
    return status_body(status)


@pytest.mark.parametrize(
    ("name", "labels", "expected"),
    [
        ("async_seconds", {"figure": "stall", "statistic": "mean"}, 0.5),
        ("async_seconds", {"figure": "stall", "statistic": "slowest_rank"}, 0.75),
        ("async_seconds", {"figure": "background", "statistic": "mean"}, 1.75),
        ("train_seconds", {"figure": "step"}, 0.1),
        ("train_seconds", {"figure": "step_in_flight"}, 0.125),
        ("train_seconds", {"figure": "wait"}, 0.5),
        ("train_seconds", {"figure": "stall"}, 0.75),
        ("checkpoint_overhead_ratio", {"statistic": "slowest_rank"}, 0.5),
        ("checkpoint_overhead_ratio", {"statistic": "rank_mean"}, 0.375),
        ("checkpoint_overhead_ratio", {"statistic": "max"}, 0.5),
        ("peak_rss_bytes", {"process": "rank", "statistic": "max"}, 1001.0),
        ("peak_rss_bytes", {"process": "checkpointer", "statistic": "max"}, 500.0),
    ],
)
def test_async_and_training_series_follow_the_status_the_operator_writes(
    name: str, labels: dict[str, str], expected: float
) -> None:
    metrics.update_benchmark("ns", "b1", "gcs", _async_trained_status())
    assert value(f"ckptbench_benchmark_{name}", **base(), **labels) == expected


def _every_family_set() -> None:
    """Series in every benchmark family: a finished save/load, async saves beside a training step
    with resources, a load that read amplified, and both demands at once."""
    from tests.test_both_metrics import both_status

    metrics.update_benchmark("ns", "b1", "gcs", SUCCEEDED)
    metrics.update_benchmark("ns", "b2", "gcs", _async_trained_status())
    metrics.update_benchmark(
        "ns", "b3", "gcs", {"load": {"readAmplification": 1.5, "maxRankReadAmplification": 2.0}}
    )
    metrics.update_benchmark("ns", "b4", "gcs", both_status())
    data_metrics.update_benchmark("ns", "d1", "gcsfs", data_status())


@pytest.mark.parametrize(
    ("name", "labels", "expected"),
    [
        ("rank_cpu_seconds", {"mode": "user", "statistic": "max"}, 1.0),
        ("rank_cpu_seconds", {"mode": "system", "statistic": "slowest_rank"}, 1.0),
        ("rank_network_bytes", {"direction": "sent", "statistic": "total"}, 0.0),
        ("rank_network_bytes", {"direction": "received", "statistic": "slowest_rank"}, 0.0),
        # The slowest rank: rank 0 (ties go to the lower rank).
        ("peak_rss_bytes", {"process": "rank", "statistic": "slowest_rank"}, 1000.0),
    ],
)
def test_rank_resources_have_a_family_per_unit(
    name: str, labels: dict[str, str], expected: float
) -> None:
    metrics.update_benchmark("ns", "b1", "gcs", _async_trained_status())
    assert value(f"ckptbench_benchmark_{name}", **base(), **labels) == expected


# The unit suffixes Prometheus' naming guide names, and the families that count things (no unit).
UNIT_SUFFIXES = ("_seconds", "_bytes", "_bytes_per_second", "_samples_per_second", "_ratio")
COUNTS = {
    *("ckptbench_benchmark_ranks", "ckptbench_benchmark_phase", "ckptbench_sweep_cells"),
    *("ckptbench_data_ranks", "ckptbench_data_phase", "ckptbench_data_epochs"),
    *("ckptbench_data_au_passed", "ckptbench_data_sustained_accelerators"),
}


def test_each_family_has_one_unit_and_says_it() -> None:
    """A family's name ends in its unit (or it counts); no label value names a unit, which would
    mean the label switches the family between units (the old rank_resources{kind})."""
    _every_family_set()
    families = list(metrics.REGISTRY.collect())
    assert {f.name for f in families} >= {
        "ckptbench_benchmark_rank_cpu_seconds",
        "ckptbench_benchmark_rank_network_bytes",
        "ckptbench_benchmark_read_amplification_ratio",
        "ckptbench_both_slowdown_ratio",
    }
    for family in families:
        base_name = family.name.removesuffix("_total")
        assert base_name.endswith(UNIT_SUFFIXES) or base_name in COUNTS or family.type == "counter"
        for sample in family.samples:
            for label, label_value in sample.labels.items():
                assert not label_value.endswith(UNIT_SUFFIXES), (family.name, label, label_value)


def test_promtool_check_metrics_is_clean() -> None:
    """``promtool check metrics`` (Prometheus' own lint of names, units and help) on a scrape with
    a series in every family: no finding."""
    from tests.tools import find_tool

    promtool = find_tool(
        "promtool",
        "promtool not installed: scripts/setup.sh installs Debian's 'prometheus' package",
    )
    _every_family_set()
    result = subprocess.run(
        [promtool, "check", "metrics"],
        input=generate_latest(metrics.REGISTRY).decode(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), (
        result.stdout + result.stderr
    )


# ---- a DataLoadingBenchmark's series ------------------------------------------------------------


def data_status(au: float = 0.95, floor: float | None = 0.9) -> dict[str, Any]:
    """A status as the operator writes it, from four ranks' results (tests/test_data_status.py)."""
    from datetime import UTC, datetime

    from ckptbench.operator.data.status import compute_status
    from ckptbench.operator.spec.status_schema import status_body
    from tests.test_data_status import Spec, done, jobset

    pods = [done(r, au=[au, au - 0.02]) for r in range(4)]
    now = datetime(2025, 3, 1, tzinfo=UTC)
    return status_body(compute_status(Spec(resolved_au_floor=floor), jobset(), pods, None, now))


def data_base(name: str = "d1") -> dict[str, str]:
    return {"namespace": "ns", "name": name, "backend": "gcsfs"}


# Each data family's series and the status field it must copy.
DATA_SERIES = [
    ("ckptbench_data_ranks", {"state": "expected"}, ("ranksExpected",)),
    ("ckptbench_data_ranks", {"state": "reported"}, ("ranksReported",)),
    ("ckptbench_data_samples_per_second", {"statistic": "value"}, ("samplesPerSecond",)),
    (
        "ckptbench_data_samples_per_second",
        {"statistic": "ci_low"},
        ("samplesPerSecondInterval", "low"),
    ),
    ("ckptbench_data_bytes_per_second", {"statistic": "value"}, ("bytesPerSecond",)),
    (
        "ckptbench_data_bytes_per_second",
        {"statistic": "ci_low"},
        ("bytesPerSecondInterval", "low"),
    ),
    (
        "ckptbench_data_accelerator_utilization_ratio",
        {"statistic": "mean"},
        ("acceleratorUtilization",),
    ),
    (
        "ckptbench_data_accelerator_utilization_ratio",
        {"statistic": "min"},
        ("acceleratorUtilizationMin",),
    ),
    ("ckptbench_data_accelerator_utilization_ratio", {"statistic": "floor"}, ("auFloor",)),
    ("ckptbench_data_time_to_first_batch_seconds", {}, ("firstBatchSeconds",)),
    ("ckptbench_data_batch_wait_seconds", {"statistic": "p50"}, ("waits", "p50Seconds")),
    ("ckptbench_data_batch_wait_seconds", {"statistic": "p99"}, ("waits", "p99Seconds")),
    ("ckptbench_data_epochs", {}, ("epochs", "count")),
    ("ckptbench_data_sustained_accelerators", {}, ("sustainedAccelerators",)),
]


@pytest.mark.parametrize(("metric", "labels", "path"), DATA_SERIES)
def test_data_series_copy_the_status(
    metric: str, labels: dict[str, str], path: tuple[str, ...]
) -> None:
    status = data_status()
    data_metrics.update_benchmark("ns", "d1", "gcsfs", status)
    expected: Any = status
    for key in path:
        expected = expected[key]
    assert value(metric, **data_base(), **labels) == pytest.approx(float(expected))


@pytest.mark.parametrize(
    ("au", "floor", "passed", "sustained"),
    [(0.95, 0.9, 1.0, 8.0), (0.85, 0.9, 0.0, 0.0), (0.95, None, None, None)],
)
def test_the_au_verdict_is_a_series_when_there_is_a_floor(
    au: float, floor: float | None, passed: float | None, sustained: float | None
) -> None:
    data_metrics.update_benchmark("ns", "d1", "gcsfs", data_status(au, floor))
    assert value("ckptbench_data_au_passed", **data_base()) == passed
    assert value("ckptbench_data_sustained_accelerators", **data_base()) == sustained
    assert value("ckptbench_data_phase", **data_base(), phase="Succeeded") == 1.0


def test_a_deleted_data_benchmark_leaves_no_series_and_a_same_named_checkpoint_s_stay() -> None:
    data_metrics.update_benchmark("ns", "b1", "gcsfs", data_status())
    data_metrics.update_benchmark("ns", "d2", "gcsfs", data_status())
    metrics.update_benchmark("ns", "b1", "gcs", SUCCEEDED)
    data_metrics.remove_benchmark("ns", "b1")
    scrape = generate_latest(metrics.REGISTRY).decode()
    assert "ckptbench_data_" in scrape and 'name="b1"' in scrape
    data_lines = [line for line in scrape.splitlines() if line.startswith("ckptbench_data_")]
    assert data_lines and not [line for line in data_lines if 'name="b1"' in line]
    assert value("ckptbench_benchmark_checkpoint_bytes", **base()) == 200.0
    # And the other way round: the checkpoint benchmark's deletion leaves the data one's.
    data_metrics.update_benchmark("ns", "b1", "gcsfs", data_status())
    metrics.remove_benchmark("ns", "b1")
    assert value("ckptbench_data_ranks", **data_base("b1"), state="reported") == 4.0
