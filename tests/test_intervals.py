"""Confidence intervals (docs/measurement.md#confidence-intervals) against hand-computed values:
each mean's Student-t interval, a rate's from its duration's, the best cell only where intervals
say so, and a ratio's interval by the delta method."""

from __future__ import annotations

import math
import statistics

import pytest

from ckptbench.workload.contract.results import figures, intervals, stats
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from ckptbench.workload.contract.results.summaries import Interval, OpSummary
from tests.test_figures import LOAD, LOAD_AT, SAVE, SAVE_AT, TOTAL, _spans, _summary

T2 = 4.302653  # t(0.975, 2): three samples
T1 = 12.706205  # t(0.975, 1): two samples


def _expected(xs: list[float]) -> tuple[float, float]:
    m, s = statistics.fmean(xs), statistics.stdev(xs)
    half = {3: T2, 2: T1}[len(xs)] * s / math.sqrt(len(xs))
    return max(0.0, m - half), m + half


def test_each_operations_mean_and_throughput_carry_their_95_percent_interval() -> None:
    s = _summary()
    for op, per_rank in (("save", SAVE), ("load", LOAD)):
        summary: OpSummary = getattr(s, op)
        collective = [max(col) for col in zip(*per_rank.values(), strict=True)]
        low, high = _expected(collective)
        # From the mean and stdev as published (rounded to microseconds): within a few of them.
        assert summary.mean_seconds_ci is not None
        assert summary.mean_seconds_ci.low == pytest.approx(low, abs=3e-6)
        assert summary.mean_seconds_ci.high == pytest.approx(high, abs=3e-6)
        rate = summary.throughput_bytes_per_second_ci
        assert rate is not None
        assert rate.low == pytest.approx(TOTAL / high, rel=1e-5)
        assert rate.low < summary.throughput_bytes_per_second
        if low > 0:
            assert rate.high == pytest.approx(TOTAL / low, rel=1e-5)
        else:  # the save's samples spread so far the mean may be near 0: unbounded
            assert op == "save" and rate.high is None


def test_rank0_and_span_means_carry_their_intervals() -> None:
    s = _summary()
    assert s.save is not None and s.load is not None
    low, high = _expected(SAVE[0])
    assert s.save.rank0_mean_seconds_ci is not None
    assert s.save.rank0_mean_seconds_ci.low == pytest.approx(low, abs=3e-6)
    assert s.save.rank0_mean_seconds_ci.high == pytest.approx(high, abs=3e-6)
    for op, per_rank, at in ((s.save, SAVE, SAVE_AT), (s.load, LOAD, LOAD_AT)):
        low, high = _expected(_spans(per_rank, at))
        assert op.span_mean_seconds_ci is not None
        assert op.span_mean_seconds_ci.low == pytest.approx(low, abs=2e-6)
        assert op.span_mean_seconds_ci.high == pytest.approx(high, abs=2e-6)
        assert op.span_throughput_bytes_per_second_ci is not None
        assert op.span_throughput_bytes_per_second_ci.low == pytest.approx(TOTAL / high, rel=1e-5)


def test_one_sample_has_no_interval() -> None:
    ranks = [RankResult(rank=0, bytes=10, save=OpTiming.of([1.0], [1.0]))]
    s = figures.summarize(ranks, world_size=1, total_bytes=10)
    assert s.save is not None
    assert s.save.mean_seconds_ci is None
    assert s.save.throughput_bytes_per_second_ci is None
    assert s.save.rank0_mean_seconds_ci is None


def test_a_rate_is_unbounded_above_when_its_durations_interval_reaches_zero() -> None:
    # 0.1 and 1.9 s: mean 1.0, s = 1.2728, half width 12.706 * 1.2728 / sqrt 2 = 11.43 > 1.
    ranks = [RankResult(rank=0, bytes=100, save=OpTiming.of([0.1, 1.9], [0.1, 1.9]))]
    s = figures.summarize(ranks, world_size=1, total_bytes=100)
    assert s.save is not None and s.save.mean_seconds_ci is not None
    assert s.save.mean_seconds_ci.low == 0.0
    assert s.save.mean_seconds_ci.high == pytest.approx(
        1.0 + T1 * math.sqrt(1.62) / math.sqrt(2), abs=1e-5
    )
    rate = s.save.throughput_bytes_per_second_ci
    assert rate is not None and rate.high is None
    assert rate.low == pytest.approx(100 / (s.save.mean_seconds_ci.high or 0.0))


def _ci(low: float, high: float | None) -> Interval:
    return Interval(low=low, high=high)


def test_best_only_where_intervals_do_not_overlap() -> None:
    # Cell 1 is highest and its interval lies above both others: best.
    found = intervals.best_of(
        [(0, 1.0, _ci(0.9, 1.1)), (1, 2.0, _ci(1.5, 2.5)), (2, 1.2, _ci(1.0, 1.4))]
    )
    assert found == intervals.Best(1, ())
    # 0.075 vs 0.073 with overlapping intervals: indistinguishable, both named.
    found = intervals.best_of([(0, 0.075, _ci(0.06, 0.09)), (1, 0.073, _ci(0.07, 0.076))])
    assert found == intervals.Best(None, (0, 1))
    # Only the cells that overlap the top one are tied; a clearly lower cell is not.
    found = intervals.best_of(
        [(0, 0.5, _ci(0.4, 0.6)), (1, 2.0, _ci(1.5, 2.5)), (2, 1.8, _ci(1.4, 2.2))]
    )
    assert found == intervals.Best(None, (1, 2))
    # Touching is overlapping.
    assert intervals.best_of([(0, 2.0, _ci(1.5, 2.5)), (1, 1.0, _ci(0.5, 1.5))]) == intervals.Best(
        None, (0, 1)
    )


def test_best_is_indistinguishable_without_intervals_or_with_an_unbounded_one() -> None:
    assert intervals.best_of([(0, 2.0, None), (1, 1.0, None)]) == intervals.Best(None, (0, 1))
    assert intervals.best_of([(0, 2.0, _ci(1.9, 2.1)), (1, 1.0, None)]) == intervals.Best(
        None, (0, 1)
    )
    assert intervals.best_of([(0, 2.0, _ci(1.9, 2.1)), (1, 1.0, _ci(0.5, None))]) == intervals.Best(
        None, (0, 1)
    )
    assert intervals.best_of([(3, 2.0, _ci(1.9, 2.1))]) == intervals.Best(3, ())
    assert intervals.best_of([]) is None


def _op(samples: int, mean: float, stdev: float) -> OpSummary:
    return OpSummary(
        samples=samples, mean_seconds=mean, stdev_seconds=stdev, p50_seconds=mean,
        p90_seconds=mean, max_seconds=mean, min_seconds=mean,
        throughput_bytes_per_second=100 / mean, min_rank_throughput_bytes_per_second=0.0,
        slowest_rank=0, slowest_rank_seconds=mean, fastest_rank_seconds=mean,
    )  # fmt: skip


def test_ratio_interval_by_the_delta_method_by_hand() -> None:
    # A: n 4, mean 2, s 0.2 -> se 0.1, relative 0.05. B: n 4, mean 1, s 0.1 -> se 0.05, rel 0.05.
    # Ratio 0.5, relative se sqrt(2) * 0.05; Welch df = (0.01 + 0.0025)^2 / (0.01^2/3 + 0.0025^2/3)
    # = 4.4118; t(0.975, 4.4118) = 2.6887 (interpolating the CDF, checked below).
    a, b = _op(4, 2.0, 0.2), _op(4, 1.0, 0.1)
    df = (0.01 + 0.0025) ** 2 / (0.01**2 / 3 + 0.0025**2 / 3)
    assert df == pytest.approx(4.41176, abs=1e-4)
    t = stats.t_quantile(0.975, df)
    assert stats.t_cdf(t, df) == pytest.approx(0.975, abs=1e-12)
    assert 2.571 < t < 2.776  # between df 5 and df 4 in the table
    half = t * 0.5 * math.sqrt(2) * 0.05
    ci = intervals.mean_ratio_interval(a, b)
    assert ci is not None and ci.high is not None
    assert ci.low == pytest.approx(0.5 - half) and ci.high == pytest.approx(0.5 + half)
    # Throughput B/A at equal bytes is 2: the inverse of the durations' bounds.
    rate = intervals.throughput_ratio_interval(a, 100, b, 100)
    assert rate is not None and rate.high is not None
    assert rate.low == pytest.approx(1 / (0.5 + half)) and rate.high == pytest.approx(
        1 / (0.5 - half)
    )
    # Twice the bytes in B: twice the ratio.
    doubled = intervals.throughput_ratio_interval(a, 100, b, 200)
    assert doubled is not None and doubled.low == pytest.approx(2 * rate.low)


def test_ratio_interval_needs_two_samples_on_each_side() -> None:
    assert intervals.mean_ratio_interval(_op(1, 2.0, 0.0), _op(4, 1.0, 0.1)) is None
    assert intervals.mean_ratio_interval(_op(4, 2.0, 0.2), _op(1, 1.0, 0.0)) is None
    assert intervals.throughput_ratio_interval(_op(4, 2.0, 0.2), 100, _op(1, 1.0, 0.0), 100) is None
    # No spread at all: the interval is the ratio itself.
    same = intervals.mean_ratio_interval(_op(3, 2.0, 0.0), _op(3, 1.0, 0.0))
    assert same == Interval(low=0.5, high=0.5)
