"""A CheckpointBenchmark's series of both demands at once (``status.both``): each copies the
status figure ``kubectl get`` shows, under the benchmark's labels, and none outlives the figure."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from ckptbench.operator.runtime import metrics
from ckptbench.operator.spec.status_schema import BenchmarkStatus, Both, status_body
from ckptbench.workload.contract.results.summaries import BothSummary, Interval, Slowdown

LABELS = {"namespace": "ns", "name": "b1", "backend": "gcs"}
FAMILIES = (
    "ckptbench_both_slowdown_ratio",
    "ckptbench_both_samples_per_second",
    "ckptbench_both_accelerator_utilization_ratio",
    "ckptbench_both_seconds",
)


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    yield
    for key in list(metrics._series):
        metrics.remove_benchmark(*key)


SAVE_INTERVAL = Interval(low=1.25, high=None)  # unbounded above


def both_status(save_interval: Interval | None = SAVE_INTERVAL) -> dict[str, Any]:
    """A status as the operator writes it (``operator/status/compute.py``) from a summary whose
    figures all differ, so a series copying the wrong one is seen."""
    summary = BothSummary(
        every=10,
        cycles=3,
        samples_per_second_alone=800.0,
        samples_per_second_together=640.0,
        au_alone=0.9,
        au_together=0.72,
        save_seconds_alone=2.0,
        save_seconds_together=3.5,
        stall_seconds_alone=0.25,
        stall_seconds_together=0.375,
        loader_slowdown=Slowdown(ratio=1.25, interval=Interval(low=1.125, high=1.5), rank=1),
        save_slowdown=Slowdown(ratio=1.75, interval=save_interval, rank=0),
        stall_slowdown=Slowdown(ratio=1.5, interval=None, rank=1),
    )
    status = BenchmarkStatus(phase="Succeeded", both=Both.model_validate(dict(summary)))
    return status_body(status)


@pytest.mark.parametrize(
    ("metric", "labels", "expected"),
    [
        ("slowdown_ratio", {"side": "loader", "statistic": "value"}, 1.25),
        ("slowdown_ratio", {"side": "loader", "statistic": "ci_low"}, 1.125),
        ("slowdown_ratio", {"side": "loader", "statistic": "ci_high"}, 1.5),
        ("slowdown_ratio", {"side": "save", "statistic": "value"}, 1.75),
        ("slowdown_ratio", {"side": "save", "statistic": "ci_low"}, 1.25),
        ("slowdown_ratio", {"side": "stall", "statistic": "value"}, 1.5),
        ("samples_per_second", {"window": "alone"}, 800.0),
        ("samples_per_second", {"window": "together"}, 640.0),
        ("accelerator_utilization_ratio", {"window": "alone"}, 0.9),
        ("accelerator_utilization_ratio", {"window": "together"}, 0.72),
        ("seconds", {"figure": "save", "window": "alone"}, 2.0),
        ("seconds", {"figure": "save", "window": "together"}, 3.5),
        ("seconds", {"figure": "stall", "window": "alone"}, 0.25),
        ("seconds", {"figure": "stall", "window": "together"}, 0.375),
    ],
)
def test_each_series_copies_its_status_figure(
    metric: str, labels: dict[str, str], expected: float
) -> None:
    metrics.update_benchmark("ns", "b1", "gcs", both_status())
    got = metrics.REGISTRY.get_sample_value(f"ckptbench_both_{metric}", {**LABELS, **labels})
    assert got == expected


def both_lines() -> list[str]:
    scrape = generate_latest(metrics.REGISTRY).decode()
    return [line for line in scrape.splitlines() if line.startswith(FAMILIES)]


def test_the_series_are_exactly_the_status_figures() -> None:
    """No more series than figures: an interval the status lacks (stall's; save's unbounded
    high) has no bound series, rather than a made-up one."""
    metrics.update_benchmark("ns", "b1", "gcs", both_status())
    assert len(both_lines()) == 4 + 2 + 2 + 2 + 4  # slowdown values and bounds, then per window
    assert not [line for line in both_lines() if 'side="stall",statistic="ci_' in line]
    assert not [line for line in both_lines() if 'side="save",statistic="ci_high"' in line]


def test_every_family_is_named_for_the_dashboard() -> None:
    assert set(metrics.metric_names()) >= set(FAMILIES)


@pytest.mark.parametrize(
    ("then", "left"),
    [
        ("deleted", 0),
        ("status-without-both", 0),
        ("interval-dropped", 13),  # save's ci_low goes, the rest stays
    ],
)
def test_no_series_outlives_its_figure(then: str, left: int) -> None:
    metrics.update_benchmark("ns", "b1", "gcs", both_status())
    metrics.update_benchmark("ns", "b2", "gcs", both_status())  # another benchmark's stay
    if then == "deleted":
        metrics.remove_benchmark("ns", "b1")
    elif then == "status-without-both":
        metrics.update_benchmark("ns", "b1", "gcs", {"phase": "Running"})
    else:
        metrics.update_benchmark("ns", "b1", "gcs", both_status(save_interval=None))
    assert len([line for line in both_lines() if 'name="b1"' in line]) == left
    assert len([line for line in both_lines() if 'name="b2"' in line]) == 14


def test_a_status_without_both_has_none() -> None:
    metrics.update_benchmark("ns", "b1", "gcs", {"phase": "Succeeded", "checkpointBytes": 1})
    assert both_lines() == []


# Each series and the status.both figure it must copy, written out here rather than read from the
# module's own table, so a series reading the wrong key is seen.
SERIES = [
    ("slowdown_ratio", {"side": "loader", "statistic": "value"}, ("loaderSlowdown", "ratio")),
    (
        "slowdown_ratio",
        {"side": "loader", "statistic": "ci_low"},
        ("loaderSlowdown", "interval", "low"),
    ),
    ("slowdown_ratio", {"side": "save", "statistic": "value"}, ("saveSlowdown", "ratio")),
    ("slowdown_ratio", {"side": "stall", "statistic": "value"}, ("stallSlowdown", "ratio")),
    (
        "slowdown_ratio",
        {"side": "stall", "statistic": "ci_low"},
        ("stallSlowdown", "interval", "low"),
    ),
    ("samples_per_second", {"window": "alone"}, ("samplesPerSecondAlone",)),
    ("samples_per_second", {"window": "together"}, ("samplesPerSecondTogether",)),
    ("accelerator_utilization_ratio", {"window": "alone"}, ("auAlone",)),
    ("accelerator_utilization_ratio", {"window": "together"}, ("auTogether",)),
    ("seconds", {"figure": "save", "window": "alone"}, ("saveSecondsAlone",)),
    ("seconds", {"figure": "stall", "window": "together"}, ("stallSecondsTogether",)),
]


@pytest.fixture(scope="module")
def computed_status() -> dict[str, Any]:
    """The status the operator computes from four ranks' termination messages
    (tests/test_status_both.py's ranks: modelled windows, rank 3 the slowest saver). Its windows
    do not vary, so each interval is its ratio: the bounds' labels are checked on
    :func:`both_status`'s."""
    from tests.test_both_windows import _Modelled
    from tests.test_status import NOW, compute, jobset, spec
    from tests.test_status_both import _done

    pods = [_done(r, _Modelled(save_with_loader=1.0 + r)) for r in range(4)]
    status: dict[str, Any] = compute(spec(), jobset(), pods, None, NOW)
    return status


@pytest.mark.parametrize(("metric", "labels", "path"), SERIES)
def test_series_from_the_status_the_operator_computes(
    computed_status: dict[str, Any], metric: str, labels: dict[str, str], path: tuple[str, ...]
) -> None:
    metrics.update_benchmark("ns", "b1", "gcs", computed_status)
    expected: Any = computed_status["both"]
    for key in path:
        expected = expected[key]
    got = metrics.REGISTRY.get_sample_value(f"ckptbench_both_{metric}", {**LABELS, **labels})
    assert got == float(expected)
