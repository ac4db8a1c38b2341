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


# -- Student's t: confidence intervals of a mean, without scipy ----------------------------------


def _incomplete_beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"incomplete_beta: x must be within [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    # The fraction converges fast only below the mean of the beta distribution; above it, use
    # the symmetry I_x(a, b) = 1 - I_{1-x}(b, a).
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _incomplete_beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _incomplete_beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"t_cdf: degrees of freedom must be positive, got {df}")
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on the CDF)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p must be within (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2.0


def mean_interval(
    n: int, mean: float, stdev: float, confidence: float
) -> tuple[float, float] | None:
    """The two-sided Student-t ``confidence`` interval of a mean of ``n`` samples with sample
    stdev ``stdev`` (n-1): mean -/+ t(1 - (1 - confidence)/2, n - 1) * stdev / sqrt(n).
    None for fewer than two samples: one sample says nothing about its spread."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"mean_interval: confidence must be within (0, 1), got {confidence}")
    if n < 2:
        return None
    half = t_quantile(1.0 - (1.0 - confidence) / 2.0, n - 1) * stdev / math.sqrt(n)
    return mean - half, mean + half
