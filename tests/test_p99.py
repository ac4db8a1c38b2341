"""p99 beside p50 and p90, only over enough samples (stats.P99_MIN_SAMPLES), in every output.

Expected values are computed here with numpy's ``linear`` definition written out by hand, not
with the code under test.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptbench.operator.runtime import metrics
from ckptbench.operator.spec.status_schema import Operation
from ckptbench.operator.status.aggregate import operation
from ckptbench.workload.contract.results import figures, stats
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from ckptbench.workload.local import report_rows
from ckptbench.workload.local.outputs import csvfile

ROOT = Path(__file__).resolve().parent.parent


def _linear_p99(xs: list[float]) -> float:
    s = sorted(xs)
    pos = (len(s) - 1) * 0.99
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _samples(n: int) -> list[float]:
    # Distinct, unsorted, with a long tail: a p99 that is the max, p90 or the mean cannot pass.
    return [1.0 + ((i * 37) % n) / n + (5.0 if i % 50 == 7 else 0.0) for i in range(n)]


def test_the_minimum_is_one_hundred_and_stated_in_the_docs() -> None:
    assert stats.P99_MIN_SAMPLES == 100
    doc = " ".join((ROOT / "docs" / "measurement.md").read_text().split())
    assert "p99 only over at least 100 samples" in doc


@pytest.mark.parametrize("n", [1, 2, 10, 99])
def test_too_few_samples_give_no_p99(n: int) -> None:
    assert stats.tail_percentile(_samples(n)) is None
    assert OpTiming.of(_samples(n), _samples(n)).stats.p99 is None


@pytest.mark.parametrize("n", [100, 101, 250])
def test_enough_samples_give_the_99th_percentile(n: int) -> None:
    xs = _samples(n)
    expected = _linear_p99(xs)
    assert expected not in (max(xs), stats.percentile(xs, 90))
    assert stats.tail_percentile(xs) == pytest.approx(expected, abs=1e-12)
    assert OpTiming.of(xs, xs).stats.p99 == pytest.approx(expected, abs=1e-6)


def _ranks(n: int) -> list[RankResult]:
    # Two ranks; rank 1 is slower on every other sample, so the collective is their max per sample.
    a = _samples(n)
    b = [x + (0.5 if i % 2 else -0.5) for i, x in enumerate(a)]
    return [
        RankResult(rank=r, bytes=1000, save=OpTiming.of(xs, xs), load=OpTiming.of(xs, xs))
        for r, xs in ((0, a), (1, b))
    ]


def _collective(n: int) -> list[float]:
    a = _samples(n)
    return [max(x, x + (0.5 if i % 2 else -0.5)) for i, x in enumerate(a)]


def test_the_summary_p99_is_over_the_collective_durations() -> None:
    summary = figures.summarize(_ranks(120), world_size=2, total_bytes=2000)
    assert summary.save is not None and summary.load is not None
    expected = _linear_p99(_collective(120))
    assert summary.save.p99_seconds == pytest.approx(expected, abs=1e-6)
    assert summary.load.p99_seconds == pytest.approx(expected, abs=1e-6)
    few = figures.summarize(_ranks(99), world_size=2, total_bytes=2000)
    assert few.save is not None and few.save.p99_seconds is None


def test_csv_table_status_and_metrics_show_it_only_when_there_is_one() -> None:
    many = figures.summarize(_ranks(120), world_size=2, total_bytes=2000)
    few = figures.summarize(_ranks(8), world_size=2, total_bytes=2000)
    assert many.save is not None and many.save.p99_seconds is not None
    [row_many, row_few] = list(
        csv.DictReader(io.StringIO(csvfile.to_csv([("many", many), ("few", few)])))
    )
    assert float(row_many["save_p99_seconds"]) == many.save.p99_seconds
    assert row_few["save_p99_seconds"] == ""

    labels = [r.label for r in report_rows.rows_for([many])]
    assert labels.index("save p99 (s)") == labels.index("save p90 (s)") + 1
    assert "load p99 (s)" in labels
    assert not any("p99" in r.label for r in report_rows.rows_for([few]))

    status = operation(many.save, {}).model_dump(by_alias=True, exclude_none=True)
    assert status["p99Seconds"] == many.save.p99_seconds
    assert "p99Seconds" in Operation.model_json_schema(by_alias=True)["properties"]
    few_status = operation(few.save, {}).model_dump(by_alias=True, exclude_none=True)  # type: ignore[arg-type]
    assert "p99Seconds" not in few_status


@pytest.fixture
def clean() -> Iterator[None]:
    yield
    metrics.remove_benchmark("ns", "p99")


def test_metrics_carry_the_p99_series_only_when_the_status_has_it(clean: None) -> None:
    labels = {"namespace": "ns", "name": "p99", "backend": "file", "operation": "save"}
    metrics.update_benchmark("ns", "p99", "file", {"save": {"p90Seconds": 2.0, "p99Seconds": 3.5}})
    get = metrics.REGISTRY.get_sample_value
    assert get("ckptbench_benchmark_duration_seconds", {**labels, "statistic": "p99"}) == 3.5
    metrics.update_benchmark("ns", "p99", "file", {"save": {"p90Seconds": 2.0}})
    assert get("ckptbench_benchmark_duration_seconds", {**labels, "statistic": "p99"}) is None
