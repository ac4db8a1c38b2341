"""Pure statistics over timing samples, shared by the workload summary and the operator status."""

from __future__ import annotations

import math
from collections.abc import Sequence


def mean(xs: Sequence[float]) -> float:
    if not xs:
        raise ValueError("mean of no samples")
    return math.fsum(xs) / len(xs)


def stdev(xs: Sequence[float]) -> float:
    """Sample standard deviation (n-1), as Python's ``statistics.stdev``; 0 for one sample."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def percentile(xs: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default ``linear`` method)."""
    if not xs:
        raise ValueError("percentile of no samples")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be within [0, 100], got {q}")
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


# A p99 is shown only over at least this many samples. With n samples the linear-interpolated
# 99th percentile sits at position 0.99 * (n - 1): below 100 samples fewer than one sample lies
# above it, and it is an interpolation between the two largest, the max in disguise. The same
# rule is stated in docs/measurement.md.
P99_MIN_SAMPLES = 100


def tail_percentile(xs: Sequence[float]) -> float | None:
    """The 99th percentile of ``xs``, or None below :data:`P99_MIN_SAMPLES` samples."""
    if len(xs) < P99_MIN_SAMPLES:
        return None
    return percentile(xs, 99)


def throughput(nbytes: int, seconds: float) -> float:
    """Bytes per second; 0 when no time was measured, rather than infinity, so JSON stays valid."""
    return nbytes / seconds if seconds > 0 else 0.0


def elementwise_max(series: Sequence[Sequence[float]]) -> list[float]:
    """Per-sample maximum across ranks: a collective operation lasts as long as its slowest rank."""
    # zip stops at the shortest series, as a sample some rank lacks has no collective duration.
    return [max(column) for column in zip(*series, strict=False)]


def pstdev(xs: Sequence[float]) -> float:
    """Population standard deviation (n), as numpy's ``np.std``; 0 for one sample."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / len(xs))
