"""Data loading's figures, each from one function, checked against what it must say on results
made by hand (the definitions are docs/data-loading.md#figures)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ckptbench.workload.contract.data import figures, waits
from ckptbench.workload.contract.data.results import DataRankResult
from ckptbench.workload.contract.results import stats


def _rank(rank: int, **kw: Any) -> DataRankResult:
    base: dict[str, Any] = {
        "rank": rank, "accelerators": 1, "samples": 100, "bytes": 100_000, "batches": 10,
        "verified_bytes": 100_000, "compute_seconds": 1.0, "loop_seconds": 2.0, "au": [0.5],
        "epoch_seconds": [1.0, 1.0], "epoch_samples": [50, 50],
        "wait_histogram": waits.histogram([0.1] * 10),
    }  # fmt: skip
    return DataRankResult(**{**base, **kw})


def test_samples_per_second_is_every_sample_over_the_epochs_of_the_slowest_rank() -> None:
    results = [_rank(0), _rank(1, epoch_seconds=[2.0, 3.0])]
    s = figures.summarize(results, 2, None)
    assert s.run_seconds == 5.0
    assert s.samples_per_second == 200 / 5.0
    assert s.bytes_per_second == 200_000 / 5.0
    assert s.egress_gbps == pytest.approx(200_000 / 5.0 * 8 / 1e9)


def test_the_rate_interval_holds_the_rate_and_comes_from_the_epochs() -> None:
    results = [_rank(0, samples=150, epoch_seconds=[1.0, 1.5, 1.2], epoch_samples=[50, 50, 50])]
    s = figures.summarize(results, 1, None)
    assert s.samples_per_second_interval is not None
    low, high = s.samples_per_second_interval.low, s.samples_per_second_interval.high
    assert s.samples_per_second is not None and high is not None
    assert low < s.samples_per_second < high
    mean = stats.mean([1.0, 1.5, 1.2])
    assert s.samples_per_second == pytest.approx(50 / mean, rel=1e-3)
    assert (
        figures.summarize([_rank(0, epoch_seconds=[1.0])], 1, None).samples_per_second_interval
        is None
    )


def test_utilisation_is_the_mean_over_every_accelerator_and_passes_at_the_floor() -> None:
    results = [_rank(0, au=[0.95, 0.85], accelerators=2), _rank(1, au=[0.92])]
    s = figures.summarize(results, 2, 0.9)
    assert s.accelerator_utilization == pytest.approx((0.95 + 0.85 + 0.92) / 3)
    assert s.accelerator_utilization_min == 0.85
    assert s.au_passed is True
    assert figures.summarize(results, 2, 0.91).au_passed is False
    exactly = [_rank(0, au=[0.9])]
    assert figures.summarize(exactly, 1, 0.9).au_passed is True  # at the floor is kept
    assert figures.summarize(results, 2, None).au_passed is None


def test_utilisation_bounds_stay_within_zero_and_one() -> None:
    s = figures.summarize([_rank(0, au=[0.99, 0.5, 1.0], accelerators=3)], 1, None)
    assert s.accelerator_utilization_interval is not None
    assert s.accelerator_utilization_interval.high == 1.0


def test_a_run_with_no_compute_has_no_utilisation() -> None:
    s = figures.summarize([_rank(0, compute_seconds=0.0, au=[0.0])], 1, None)
    assert s.accelerator_utilization is None and s.au_passed is None


def test_verified_only_when_every_byte_handed_over_was_checked() -> None:
    assert figures.summarize([_rank(0)], 1, None).verified
    assert not figures.summarize([_rank(0, verified_bytes=99_999)], 1, None).verified


def test_a_failed_or_missing_rank_fails_the_run_by_name() -> None:
    s = figures.summarize([_rank(0), DataRankResult(rank=1, error="SampleError: sample 7")], 2,
                          None)  # fmt: skip
    assert not s.succeeded and s.errors == {"1": "SampleError: sample 7"}
    assert not figures.summarize([_rank(0)], 2, None).succeeded


def test_retries_and_requests_add_up_over_ranks_and_listing_is_the_slowest() -> None:
    results = [
        _rank(0, retries={"HTTP 503": 2}, requests=10, listing_seconds=0.5),
        _rank(1, retries={"HTTP 503": 1, "ConnectionError": 4}, requests=7, listing_seconds=1.5),
    ]
    s = figures.summarize(results, 2, None)
    assert s.retries == {"HTTP 503": 3, "ConnectionError": 4}
    assert s.requests == 17 and s.listing_seconds == 1.5


def test_wait_percentiles_from_merged_histograms_are_within_the_bucket_width() -> None:
    rng = random.Random(3)
    per_rank = [[rng.lognormvariate(-4, 1.5) for _ in range(2000)] for _ in range(3)]
    everything = sorted(w for ws in per_rank for w in ws)
    merged = waits.merge(waits.histogram(ws) for ws in per_rank)
    for q in (50, 90, 99):
        exact = stats.percentile(everything, q)
        got = waits.percentile(merged, q)
        assert got is not None
        assert got == pytest.approx(exact, rel=(waits.RATIO - 1) / 2 + 1e-3), q


def test_a_percentile_is_read_at_its_rank_not_the_last_bucket() -> None:
    hist = waits.histogram([0.001] * 98 + [5.0] * 2)
    assert waits.percentile(hist, 50) == pytest.approx(0.001, rel=0.03)
    assert waits.percentile(hist, 99) == pytest.approx(5.0, rel=0.03)
    assert waits.percentile([], 50) is None
    halves = waits.histogram([0.001] * 50 + [5.0] * 50)
    assert waits.percentile(halves, 50) == pytest.approx(0.001, rel=0.03)  # the 50th of 100


@pytest.mark.parametrize(
    ("points", "floor", "expected"),
    [
        ([(1, 0.97), (2, 0.95), (4, 0.91), (8, 0.7)], 0.9, 4),
        ([(8, 0.95), (1, 0.99)], 0.9, 8),
        ([(1, 0.5), (2, 0.4)], 0.9, None),
        ([(1, 0.99)], None, None),
        ([(1, None), (2, 0.95)], 0.9, 2),
    ],
)
def test_sustained_accelerators_is_the_most_that_kept_the_floor(
    points: list[tuple[int, float | None]], floor: float | None, expected: int | None
) -> None:
    assert figures.sustained_accelerators(points, floor) == expected


def test_the_byte_rate_interval_is_the_sample_rate_s_scaled_by_bytes_per_sample() -> None:
    results = [_rank(0, bytes=300_000, epoch_seconds=[1.0, 1.5, 1.2], epoch_samples=[50] * 3)]
    s = figures.summarize(results, 1, None)
    assert s.bytes_per_second_interval is not None and s.bytes_per_second is not None
    high = s.bytes_per_second_interval.high
    assert high is not None
    assert s.bytes_per_second_interval.low < s.bytes_per_second < high
    assert s.bytes_per_second_interval == figures.rate_interval(100_000, [1.0, 1.5, 1.2])
    assert (
        figures.summarize([_rank(0, epoch_seconds=[1.0])], 1, None).bytes_per_second_interval
        is None
    )


@pytest.mark.parametrize(
    ("epochs", "slowest"),
    [
        ({0: [1.0, 1.0], 1: [2.0, 3.0], 2: [1.0, 4.0]}, 1),  # a tie: the lower rank
        ({0: [1.0], 1: [0.5], 2: [0.9]}, 0),
        ({0: [], 1: [0.5]}, 1),
        ({0: [], 1: []}, None),
    ],
)
def test_the_slowest_rank_is_the_one_whose_own_epochs_took_longest(
    epochs: dict[int, list[float]], slowest: int | None
) -> None:
    results = [_rank(r, epoch_seconds=e, epoch_samples=[1] * len(e)) for r, e in epochs.items()]
    assert figures.slowest_rank(results) == slowest


def test_a_failed_rank_is_never_the_slowest() -> None:
    results = [_rank(0, epoch_seconds=[1.0]), _rank(1, error="boom", epoch_seconds=[9.0])]
    assert figures.slowest_rank(results) == 0
