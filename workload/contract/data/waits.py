"""Batch waits as a histogram that ranks can merge: log-spaced buckets, 5% wide.

A rank's termination message holds at most 4 KiB, too little for every wait of a long run; a
histogram of fixed buckets is small, and the run's percentiles come from the sum of the ranks'
histograms. A percentile read from it is the geometric middle of its bucket: within 2.5% of the
exact figure (docs/data-loading.md#figures).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

RATIO = 1.05
FLOOR_SECONDS = 1e-6  # waits shorter than this (a batch already there) share bucket 0


def bucket(seconds: float) -> int:
    if seconds <= FLOOR_SECONDS:
        return 0
    return 1 + int(math.log(seconds / FLOOR_SECONDS, RATIO))


def middle(index: int) -> float:
    """The geometric middle of bucket ``index`` (0 for the bucket of the shortest waits)."""
    if index == 0:
        return 0.0
    return FLOOR_SECONDS * RATIO ** (index - 1) * math.sqrt(RATIO)


def histogram(waits: Iterable[float]) -> list[list[int]]:
    """Sparse ``[[bucket, count], ...]``, by bucket."""
    counts = Counter(bucket(w) for w in waits)
    return [[b, counts[b]] for b in sorted(counts)]


def merge(histograms: Iterable[Sequence[Sequence[int]]]) -> list[list[int]]:
    counts: Counter[int] = Counter()
    for h in histograms:
        for b, n in h:
            counts[b] += n
    return [[b, counts[b]] for b in sorted(counts)]


def percentile(hist: Sequence[Sequence[int]], q: float) -> float | None:
    """The ``q``-th percentile (0-100): the middle of the bucket holding that rank of wait, the
    nearest-rank definition; None for no waits."""
    total = sum(n for _, n in hist)
    if total == 0:
        return None
    wanted = max(1, math.ceil(q / 100 * total))
    seen = 0
    for b, n in hist:
        seen += n
        if seen >= wanted:
            return middle(b)
    return middle(hist[-1][0])
