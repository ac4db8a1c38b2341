"""Result models and their aggregation: the numbers users compare must be right."""

from __future__ import annotations

import json

import pytest

from ckptbench.workload.contract.results.figures import summarize
from ckptbench.workload.contract.results.rank import (
    TERMINATION_MESSAGE_LIMIT,
    OpStats,
    OpTiming,
    RankResult,
)


def _rank(
    rank: int,
    save: list[float],
    load: list[float],
    *,
    own_save: list[float] | None = None,
    own_load: list[float] | None = None,
    nbytes: int = 1000,
    verified: bool | None = True,
    error: str | None = None,
) -> RankResult:
    return RankResult(
        rank=rank,
        host=f"host-{rank}",
        bytes=nbytes,
        save=OpTiming.of(save, own_save or save),
        load=OpTiming.of(load, own_load or load),
        verified=verified,
        error=error,
    )


def test_op_stats() -> None:
    s = OpStats.of([4.0, 1.0, 3.0, 2.0])
    assert (s.n, s.mean, s.p50, s.max, s.min) == (4, 2.5, 2.5, 4.0, 1.0)
    assert s.p90 == pytest.approx(3.7)
    assert s.stdev == pytest.approx(1.290994, abs=1e-6)


def test_summary_uses_max_over_ranks_per_sample() -> None:
    results = [
        _rank(0, [1.0, 3.0], [1.0, 1.0], own_save=[0.5, 1.0]),
        _rank(1, [2.0, 2.0], [1.0, 2.0], own_save=[2.0, 2.0]),
    ]
    s = summarize(results, world_size=2, total_bytes=2000)
    assert s.save is not None and s.load is not None
    assert s.save.seconds == [2.0, 3.0]
    assert s.save.mean_seconds == 2.5
    assert s.save.max_seconds == 3.0
    assert s.save.throughput_bytes_per_second == pytest.approx(2000 / 2.5)
    # Rank 1's own mean is 2.0 s: it is the slowest, and sets the min per-rank throughput.
    assert s.save.slowest_rank == 1
    assert s.save.slowest_rank_seconds == 2.0
    assert s.save.fastest_rank_seconds == 0.75
    assert s.save.min_rank_throughput_bytes_per_second == pytest.approx(1000 / 2.0)
    assert s.load.seconds == [1.0, 2.0]
    assert s.verified is True and s.succeeded
    assert s.ranks_reported == 2 and s.missing_ranks == []


def test_missing_ranks_are_named_and_fail_the_run() -> None:
    s = summarize([_rank(0, [1.0], [1.0]), _rank(2, [1.0], [1.0])], world_size=4, total_bytes=4000)
    assert s.missing_ranks == [1, 3] and s.missing_rank_count == 2
    assert s.verified is None
    assert not s.succeeded


def test_missing_ranks_list_is_bounded() -> None:
    s = summarize([], world_size=1000, total_bytes=1)
    assert len(s.missing_ranks) == 20 and s.missing_rank_count == 1000
    assert s.save is None and not s.succeeded


def test_verification_failure_and_errors() -> None:
    results = [
        _rank(0, [1.0], [1.0]),
        _rank(1, [1.0], [1.0], verified=False, error="VerificationError: dummy_tensor_1"),
    ]
    s = summarize(results, world_size=2, total_bytes=2000)
    assert s.verified is False
    assert s.error_count == 1 and s.errors[0].rank == 1
    assert "dummy_tensor_1" in s.errors[0].error
    assert not s.succeeded


def test_rank_that_failed_before_saving() -> None:
    failed = RankResult(rank=1, error="RendezvousTimeout: rank0:29500 after 600 s")
    s = summarize([_rank(0, [1.0], [1.0]), failed], world_size=2, total_bytes=2000)
    assert s.save is not None and s.save.slowest_rank == 0
    assert s.errors[0].error.startswith("RendezvousTimeout")


def test_results_outside_the_world_are_ignored() -> None:
    s = summarize([_rank(0, [1.0], [1.0]), _rank(7, [9.0], [9.0])], world_size=1, total_bytes=1)
    assert s.ranks_reported == 1 and s.save is not None and s.save.mean_seconds == 1.0


def test_async_blocked_time_is_summarised() -> None:
    r = RankResult(
        rank=0,
        bytes=10,
        save=OpTiming.of([2.0, 2.0], [1.5, 1.5], blocked_seconds=[0.25, 0.75]),
        load=OpTiming.of([1.0], [1.0]),
        verified=True,
    )
    s = summarize([r], world_size=1, total_bytes=10)
    assert s.save is not None and s.save.stall is not None
    assert s.save.stall.mean_seconds == 0.5 and s.save.stall.max_seconds == 0.75
    assert s.save.staging is None and s.save.background is None


def test_async_figures_are_summarised_per_rank_with_the_slowest_rank() -> None:
    def rank(n: int, stall: list[float], background: list[float]) -> RankResult:
        save = OpTiming.of(
            [2.0, 2.0],
            [1.5, 1.5],
            blocked_seconds=stall,
            staging_seconds=[0.1, 0.3],
            background_seconds=background,
        )
        return RankResult(rank=n, bytes=10, save=save, load=OpTiming.of([1.0], [1.0]))

    s = summarize(
        [rank(0, [0.2, 0.2], [1.0, 1.0]), rank(1, [0.4, 0.8], [0.5, 0.5])],
        world_size=2,
        total_bytes=20,
    )
    assert s.save is not None and s.save.stall is not None and s.save.background is not None
    assert s.save.stall.slowest_rank == 1 and s.save.stall.slowest_rank_seconds == 0.6
    assert s.save.stall.mean_seconds == 0.4 and s.save.stall.rank_seconds == [0.2, 0.6]
    assert s.save.stall.max_seconds == 0.8
    assert s.save.background.slowest_rank == 0 and s.save.background.slowest_rank_seconds == 1.0
    assert s.save.staging is not None and s.save.staging.mean_seconds == 0.2


@pytest.mark.parametrize("samples", [1, 8, 100, 1000])
def test_termination_message_fits_whatever_the_sample_count(samples: int) -> None:
    seconds = [1.0 + i * 0.123456789 for i in range(samples)]
    r = RankResult(
        rank=12345,
        host="a-very-long-pod-host-name-" * 3,
        bytes=18 * 1024**3,
        save=OpTiming.of(seconds, seconds, blocked_seconds=seconds),
        load=OpTiming.of(seconds, seconds),
        verified=True,
        error="x" * 5000,
    )
    text = r.to_termination_message()
    assert len(text.encode()) <= TERMINATION_MESSAGE_LIMIT
    back = RankResult.from_termination_message(text)
    assert back.rank == 12345 and back.save is not None
    assert back.save.stats.n == samples
    assert back.save.stats.mean == pytest.approx(sum(seconds) / samples, abs=1e-5)
    assert back.error is not None and back.error.startswith("xxx")


def test_short_message_keeps_its_samples() -> None:
    r = _rank(3, [1.5, 2.5], [0.5, 0.25])
    back = RankResult.from_termination_message(r.to_termination_message())
    assert back == r
    assert json.loads(r.to_termination_message())["v"] == 2


def test_summary_falls_back_to_statistics_when_samples_were_dropped() -> None:
    full = _rank(0, [1.0, 3.0], [1.0, 1.0])
    slim = full.model_copy(update={"save": full.save.without_samples() if full.save else None})
    other = _rank(1, [1.0, 1.0], [1.0, 1.0])
    s = summarize([slim, other], world_size=2, total_bytes=2000)
    assert s.save is not None
    assert s.save.seconds is None
    assert s.save.mean_seconds == 2.0  # the worse rank's statistics stand in


def test_error_text_is_bounded() -> None:
    text = RankResult.error_text(RuntimeError("y" * 5000))
    assert text.startswith("RuntimeError: y") and len(text) <= 1000
