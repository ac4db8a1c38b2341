from __future__ import annotations

import statistics

import pytest

from ckptbench.workload.contract import stats


@pytest.mark.parametrize(
    "xs", [[1.0], [1.0, 2.0], [3.0, 1.0, 2.0, 10.0], [0.5, 0.25, 0.125, 8.0, 4.0, 2.0, 1.0]]
)
def test_mean_and_stdev_agree_with_the_standard_library(xs: list[float]) -> None:
    assert stats.mean(xs) == pytest.approx(statistics.fmean(xs))
    expected = statistics.stdev(xs) if len(xs) > 1 else 0.0
    assert stats.stdev(xs) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("xs", "q", "expected"),
    [
        ([5.0], 50, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        ([4.0, 3.0, 2.0, 1.0], 90, 3.7),
        ([10.0, 20.0], 90, 19.0),
    ],
)
def test_percentile_linear_interpolation(xs: list[float], q: float, expected: float) -> None:
    assert stats.percentile(xs, q) == pytest.approx(expected)


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        stats.percentile([], 50)
    with pytest.raises(ValueError):
        stats.percentile([1.0], 101)
    with pytest.raises(ValueError):
        stats.mean([])


@pytest.mark.parametrize(
    ("nbytes", "seconds", "expected"), [(100, 2.0, 50.0), (100, 0.0, 0.0), (0, 1.0, 0.0)]
)
def test_throughput(nbytes: int, seconds: float, expected: float) -> None:
    assert stats.throughput(nbytes, seconds) == expected


def test_elementwise_max_takes_the_slowest_rank_per_sample() -> None:
    assert stats.elementwise_max([[1.0, 5.0, 2.0], [3.0, 1.0, 2.5]]) == [3.0, 5.0, 2.5]
    assert stats.elementwise_max([[1.0, 2.0], [3.0]]) == [3.0]
    assert stats.elementwise_max([]) == []
