"""How sure a figure is: confidence intervals of means, rates and ratios, and the best cell only
where the intervals tell it apart (docs/measurement.md#confidence-intervals).

- :func:`mean_interval`: a mean's Student-t interval; :func:`rate_interval`: a rate's, from its
  duration's;
- :func:`mean_ratio_interval` and :func:`throughput_ratio_interval`: one cell against another
  (Welch's degrees of freedom); :func:`ratio_interval`: the same over two sets of windows;
- :func:`best_of`: the best cell, only where its interval is above every other's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from ckptbench.workload.contract.results import stats
from ckptbench.workload.contract.results.rank import ROUND, OpStats
from ckptbench.workload.contract.results.summaries import Interval, OpSummary

# The level of every confidence interval published: docs/measurement.md#confidence-intervals.
CONFIDENCE = 0.95


def mean_interval(summary: OpStats | None) -> Interval | None:
    """The Student-t :data:`CONFIDENCE` interval of a mean of durations; None below 2 samples.

    A duration is positive, so the lower bound is at least 0."""
    if summary is None:
        return None
    bounds = stats.mean_interval(summary.n, summary.mean, summary.stdev, CONFIDENCE)
    if bounds is None:
        return None
    low, high = bounds
    return Interval(low=round(max(0.0, low), ROUND), high=round(high, ROUND))


def rate_interval(nbytes: int, seconds: Interval | None) -> Interval | None:
    """The interval of ``nbytes`` / mean seconds: ``nbytes`` over each bound of the mean's.

    A decreasing function of the mean maps its interval onto one of the same level exactly. When
    the mean's lower bound is 0 the rate is unbounded above (``high`` None)."""
    if seconds is None or seconds.high is None:
        return None
    return Interval(
        low=stats.throughput(nbytes, seconds.high),
        high=stats.throughput(nbytes, seconds.low) if seconds.low > 0 else None,
    )


def _welch_df(na: int, sa: float, nb: int, sb: float) -> float:
    """Welch-Satterthwaite degrees of freedom of two means' difference (or ratio)."""
    va, vb = sa**2 / na, sb**2 / nb
    if va + vb == 0:
        return float(min(na, nb) - 1)
    return (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))


def _ratio(na: int, ma: float, sa: float, nb: int, mb: float, sb: float) -> Interval | None:
    """The :data:`CONFIDENCE` interval of mean b / mean a (n, mean, stdev each) by the delta
    method: relative standard error sqrt((se_a/m_a)^2 + (se_b/m_b)^2), t at the
    Welch-Satterthwaite degrees of freedom. None with fewer than two samples on either side, or a
    mean of 0."""
    if na < 2 or nb < 2 or ma <= 0 or mb <= 0:
        return None
    ratio = mb / ma
    relative = math.hypot(sa / math.sqrt(na) / ma, sb / math.sqrt(nb) / mb)
    half = stats.t_quantile(1.0 - (1.0 - CONFIDENCE) / 2.0, max(1.0, _welch_df(na, sa, nb, sb)))
    return Interval(low=max(0.0, ratio * (1 - half * relative)), high=ratio * (1 + half * relative))


def mean_ratio_interval(a: OpSummary, b: OpSummary) -> Interval | None:
    """The interval of ``b.mean_seconds / a.mean_seconds`` (:func:`_ratio`)."""
    return _ratio(
        a.samples, a.mean_seconds, a.stdev_seconds, b.samples, b.mean_seconds, b.stdev_seconds
    )


def ratio_interval(a: OpStats, b: OpStats) -> Interval | None:
    """The interval of ``b.mean / a.mean`` (:func:`_ratio`), each over its samples: both demands'
    slowdowns, together's windows over alone's (results/both.py); bounds rounded."""
    found = _ratio(a.n, a.mean, a.stdev, b.n, b.mean, b.stdev)
    if found is None or found.high is None:
        return found
    return Interval(low=round(found.low, ROUND), high=round(found.high, ROUND))


def throughput_ratio_interval(
    a: OpSummary, a_bytes: int, b: OpSummary, b_bytes: int
) -> Interval | None:
    """The interval of ``b``'s throughput / ``a``'s: (b_bytes / a_bytes) over each bound of the
    durations' ratio :func:`mean_ratio_interval`; unbounded above (``high`` None) when its lower
    bound is 0."""
    seconds = mean_ratio_interval(a, b)
    if seconds is None or seconds.high is None or a_bytes <= 0:
        return None
    scale = b_bytes / a_bytes
    return Interval(low=scale / seconds.high, high=scale / seconds.low if seconds.low > 0 else None)


class Best(NamedTuple):
    """The best of several cells for one operation: ``winner`` (its index) when intervals tell it
    apart from every other (``tied`` empty); otherwise ``winner`` None and ``tied`` the cells that
    cannot be told from the highest (it included), in index order."""

    winner: int | None
    tied: tuple[int, ...]


def best_of(candidates: Sequence[tuple[int, float, Interval | None]]) -> Best | None:
    """``(index, rate, its interval)`` of each cell that succeeded: the highest rate is the best
    only when its interval lies wholly above every other cell's (non-overlapping intervals, a
    stricter test than one at the same level). A cell without an interval (one sample) cannot be
    told from any other. None without candidates."""
    if not candidates:
        return None
    # Ties go to the lower index, so the answer does not depend on the order of equal rates.
    top = max(candidates, key=lambda c: (c[1], -c[0]))
    rivals = [c for c in candidates if c[0] != top[0]]
    tied = [c[0] for c in rivals if not _above(top[2], c[2])]
    if not tied:
        return Best(top[0], ())
    return Best(None, tuple(sorted([top[0], *tied])))


def _above(a: Interval | None, b: Interval | None) -> bool:
    """Whether interval ``a`` lies wholly above interval ``b``."""
    return a is not None and b is not None and b.high is not None and a.low > b.high
