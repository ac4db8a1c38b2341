"""Kubernetes resource quantities (``64Gi``, ``500m``, ``1.5``, ``1e9``) as exact numbers.

One parser for the memory budget (bytes) and the CPU limit (cores): exact fractions, so that a
limit of ``2000m`` is two threads and not ``ceil(2.0000000001)``.
"""

from __future__ import annotations

import math
from fractions import Fraction

_SUFFIXES: dict[str, int | Fraction] = {
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "Pi": 1024**5,
    "Ei": 1024**6,
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": 1000,
    "K": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
    "P": 1000**5,
    "E": 1000**6,
}


def quantity(text: str) -> Fraction:
    """The value of a quantity; ValueError when ``text`` is not one."""
    s = str(text).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if s.endswith(suffix) and s[: -len(suffix)]:
            return _number(s[: -len(suffix)], text) * _SUFFIXES[suffix]
    return _number(s, text)


def _number(s: str, text: str) -> Fraction:
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"not a quantity: {text!r}") from None


def cpu_threads(limit: str | int | float) -> int:
    """Threads for a CPU limit: the cores it allows rounded up, at least one (``500m`` -> 1,
    ``1.5`` -> 2, ``2`` -> 2). ValueError for a limit that is not a quantity or is negative."""
    cores = quantity(str(limit))
    if cores < 0:
        raise ValueError(f"a CPU limit cannot be negative: {limit!r}")
    return max(1, math.ceil(cores))
