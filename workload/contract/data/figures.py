"""The run's figures, from its ranks' results: one function each, read by every output (the table,
JSON, CSV, and the status in a cluster). docs/data-loading.md#figures defines each.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from ckptbench.workload.contract.data import waits
from ckptbench.workload.contract.data.results import DataRankResult
from ckptbench.workload.contract.results import stats
from ckptbench.workload.contract.results.intervals import CONFIDENCE
from ckptbench.workload.contract.results.summaries import Interval

ROUND = 6


class DataSummary(BaseModel):
    """A data-loading run, summed over its ranks."""

    ranks_expected: int
    ranks_reported: int
    accelerators: int = 0
    samples: int = 0
    bytes: int = 0
    verified_bytes: int = 0
    run_seconds: float | None = None
    samples_per_second: float | None = None
    samples_per_second_interval: Interval | None = None
    bytes_per_second: float | None = None
    bytes_per_second_interval: Interval | None = None
    egress_gbps: float | None = Field(None, description="Decimal gigabits per second.")
    accelerator_utilization: float | None = None
    accelerator_utilization_interval: Interval | None = None
    accelerator_utilization_min: float | None = None
    au_floor: float | None = None
    au_passed: bool | None = None
    first_batch_seconds: float | None = None
    epoch_seconds: list[float] = Field(default_factory=list)
    batch_wait_p50_seconds: float | None = None
    batch_wait_p90_seconds: float | None = None
    batch_wait_p99_seconds: float | None = None
    listing_seconds: float | None = None
    prepare_seconds: float | None = None
    requests: int | None = None
    retries: dict[str, int] = Field(default_factory=dict)
    worker_peak_rss_bytes: int | None = None
    errors: dict[str, str] = Field(default_factory=dict)
    verified: bool = False

    @property
    def succeeded(self) -> bool:
        return self.ranks_reported == self.ranks_expected and not self.errors


def epoch_seconds(results: Sequence[DataRankResult]) -> list[float]:
    """Each epoch's time: its slowest rank's (a rank's is its slowest accelerator's)."""
    epochs = max((len(r.epoch_seconds) for r in results), default=0)
    return [
        max(r.epoch_seconds[i] for r in results if len(r.epoch_seconds) > i) for i in range(epochs)
    ]


def _interval(values: Sequence[float], ceiling: float | None = None) -> Interval | None:
    """The Student-t interval of the mean of ``values``, within [0, ``ceiling``]."""
    if len(values) < 2:
        return None
    bounds = stats.mean_interval(len(values), stats.mean(values), stats.stdev(values), CONFIDENCE)
    if bounds is None:
        return None
    low, high = bounds
    if ceiling is not None:
        high = min(high, ceiling)
    return Interval(low=round(max(0.0, low), ROUND), high=round(high, ROUND))


def rate_interval(amount: float, epochs: Sequence[float]) -> Interval | None:
    """The interval of a rate per epoch (``amount`` an epoch over the mean epoch's seconds):
    ``amount`` over each bound of the mean's interval, which a decreasing function maps onto
    an interval of the same level."""
    seconds = _interval(epochs)
    if seconds is None:
        return None
    return Interval(
        low=round(amount / seconds.high, 3) if seconds.high else 0.0,
        high=round(amount / seconds.low, 3) if seconds.low > 0 else None,
    )


def summarize(
    results: Sequence[DataRankResult], world_size: int, au_floor: float | None
) -> DataSummary:
    good = [r for r in results if r.succeeded]
    errors = {str(r.rank): r.error or "" for r in results if not r.succeeded}
    out = DataSummary(
        ranks_expected=world_size,
        ranks_reported=len(results),
        errors=errors,
        au_floor=au_floor,
    )
    if not good:
        return out
    samples = sum(r.samples for r in good)
    nbytes = sum(r.bytes for r in good)
    epochs = epoch_seconds(good)
    seconds = sum(epochs)
    # No emulated compute, no utilisation: a pure read keeps no accelerator busy by design.
    computes = any(r.compute_seconds > 0 for r in good)
    au = [a for r in good for a in r.au] if computes else []
    hist = waits.merge(r.wait_histogram for r in good)
    mean_au = stats.mean(au) if au else None
    listing = [r.listing_seconds for r in good if r.listing_seconds is not None]
    prepare = [r.prepare_seconds for r in good if r.prepare_seconds is not None]
    requests = [r.requests for r in good if r.requests is not None]
    retries: dict[str, int] = {}
    for r in good:
        for cause, n in r.retries.items():
            retries[cause] = retries.get(cause, 0) + n
    rss = [r.worker_peak_rss_bytes for r in good if r.worker_peak_rss_bytes is not None]
    rate = samples / seconds if seconds else None
    byte_rate = nbytes / seconds if seconds else None
    return out.model_copy(
        update={
            "accelerators": sum(r.accelerators for r in good),
            "samples": samples,
            "bytes": nbytes,
            "verified_bytes": sum(r.verified_bytes for r in good),
            "run_seconds": None if not seconds else round(seconds, ROUND),
            "samples_per_second": None if rate is None else round(rate, 3),
            "samples_per_second_interval": rate_interval(samples / len(epochs), epochs),
            "bytes_per_second": None if byte_rate is None else round(byte_rate, 1),
            "bytes_per_second_interval": rate_interval(nbytes / len(epochs), epochs),
            "egress_gbps": None if byte_rate is None else round(byte_rate * 8 / 1e9, 6),
            "accelerator_utilization": None if mean_au is None else round(mean_au, ROUND),
            "accelerator_utilization_interval": _interval(au, ceiling=1.0),
            "accelerator_utilization_min": round(min(au), ROUND) if au else None,
            "au_passed": None if au_floor is None or mean_au is None else mean_au >= au_floor,
            "first_batch_seconds": max(
                (r.first_batch_seconds for r in good if r.first_batch_seconds is not None),
                default=None,
            ),
            "epoch_seconds": [round(s, ROUND) for s in epoch_seconds(good)],
            "batch_wait_p50_seconds": waits.percentile(hist, 50),
            "batch_wait_p90_seconds": waits.percentile(hist, 90),
            "batch_wait_p99_seconds": waits.percentile(hist, 99),
            "listing_seconds": max(listing) if listing else None,
            "prepare_seconds": max(prepare) if prepare else None,
            "requests": sum(requests) if requests else None,
            "retries": retries,
            "worker_peak_rss_bytes": max(rss) if rss else None,
            "verified": nbytes > 0 and sum(r.verified_bytes for r in good) == nbytes,
        }
    )


def slowest_rank(results: Sequence[DataRankResult]) -> int | None:
    """The succeeded rank whose own epochs took longest (the lowest such rank on a tie): the one
    that set the epochs' pace; None when no rank read an epoch."""
    timed = [(sum(r.epoch_seconds), -r.rank) for r in results if r.succeeded and r.epoch_seconds]
    return -max(timed)[1] if timed else None


def sustained_accelerators(
    points: Sequence[tuple[int, float | None]], au_floor: float | None
) -> int | None:
    """MLPerf Storage's headline from an AU curve: of (accelerators, mean AU) points, the largest
    number of accelerators whose utilisation stayed at or above the floor; None when none did or
    no floor applies."""
    if au_floor is None:
        return None
    kept = [n for n, au in points if au is not None and au >= au_floor]
    return max(kept) if kept else None
