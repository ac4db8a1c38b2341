from __future__ import annotations

import math
import statistics

import pytest

from ckptbench.workload.contract.results import stats


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


# Student's t, two-sided 95% (the 0.975 quantile) and others, from the published tables
# (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2), to the digits printed there.
@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        (0.975, 1, 12.706),
        (0.975, 2, 4.303),
        (0.975, 3, 3.182),
        (0.975, 4, 2.776),
        (0.975, 5, 2.571),
        (0.975, 9, 2.262),
        (0.975, 10, 2.228),
        (0.975, 30, 2.042),
        (0.975, 100, 1.984),
        (0.95, 1, 6.314),
        (0.95, 10, 1.812),
        (0.995, 3, 5.841),
        (0.99, 20, 2.528),
        (0.9, 5, 1.476),
    ],
)
def test_t_quantile_matches_the_published_table(p: float, df: int, expected: float) -> None:
    assert stats.t_quantile(p, df) == pytest.approx(expected, abs=6e-4)
    assert stats.t_quantile(1 - p, df) == pytest.approx(-expected, abs=6e-4)


def test_t_quantile_tends_to_the_normal_quantile() -> None:
    normal = statistics.NormalDist().inv_cdf(0.975)
    assert stats.t_quantile(0.975, 1e7) == pytest.approx(normal, abs=1e-5)


def test_t_cdf_closed_forms() -> None:
    # One degree of freedom is Cauchy: 1/2 + atan(t)/pi; two: 1/2 + t / (2 sqrt(2 + t^2)).
    for t in (-3.0, -0.5, 0.0, 0.7, 4.0):
        assert stats.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert stats.t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)


def test_mean_interval_by_hand() -> None:
    # 1.0, 1.2, 1.1: mean 1.1, s = 0.1, n = 3: half width 4.302653 * 0.1 / sqrt(3) = 0.248414.
    low, high = stats.mean_interval(3, 1.1, 0.1, 0.95) or (0.0, 0.0)
    assert low == pytest.approx(1.1 - 0.248414, abs=1e-6)
    assert high == pytest.approx(1.1 + 0.248414, abs=1e-6)
    assert stats.mean_interval(1, 1.1, 0.0, 0.95) is None


def test_t_functions_reject_bad_input() -> None:
    with pytest.raises(ValueError):
        stats.t_quantile(1.0, 3)
    with pytest.raises(ValueError):
        stats.t_cdf(1.0, 0)
    with pytest.raises(ValueError):
        stats.mean_interval(3, 1.0, 0.1, 1.5)
    with pytest.raises(ValueError):
        stats.incomplete_beta(1.0, 1.0, 1.5)
