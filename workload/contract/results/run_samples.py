"""The run's per-sample figures over all ranks, as rank 0 reports them in its termination message.

A figure over samples (mean, percentiles, span) needs, per sample, the max over ranks of the
collective's duration and the latest end minus the earliest start. Each rank's message carries
its own per-sample lists only while they fit in Kubernetes' 4 KiB, and from about 12 samples on
they are dropped, so an operator reading messages alone would have to fall back to one rank's
statistics. Rank 0 gathers every rank's full result anyway (for ``results/summary.json``), so it
reduces them to the run's two vectors per operation with the figures' own functions
(:func:`~ckptbench.workload.contract.results.figures.run_samples_of`), and puts them, packed, in
its own message; every output then reads the same vectors (figures.summarize_records). Where the
vectors do not fit (past about 100 samples), the message keeps their figures instead
(:class:`~ckptbench.workload.contract.results.rank.RunFigures`, beside ``RunSamples`` there).

Packing: each value in whole microseconds (the results are rounded to them already, so nothing is
lost), a span as its skew over the sample's seconds, as zigzag varints, zlib-compressed, base64.
What a message holds is untrusted: the packed text, the inflated bytes and the values are all
bounded.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from typing import NamedTuple

MICRO = 1_000_000
MAX_PACKED = 4096
MAX_VALUES = 2 * 2000  # two vectors of at most MAX_SAMPLES_LISTED samples
_MAX_MICROS = 10**8 * MICRO  # rank.MAX_SECONDS


class Vectors(NamedTuple):
    """One operation's per-sample figures over all ranks: the collective's duration (the max over
    ranks) and the span (latest end minus earliest start), None when not every rank timed it."""

    seconds: list[float]
    spans: list[float] | None


def pack(vectors: Vectors) -> str:
    seconds = [round(x * MICRO) for x in vectors.seconds]
    values = [len(seconds), 1 if vectors.spans is not None else 0, *seconds]
    if vectors.spans is not None:
        # A span is the sample's collective seconds plus the ranks' skew: the skew is small.
        values += [round(x * MICRO) - s for x, s in zip(vectors.spans, seconds, strict=True)]
    return base64.b64encode(zlib.compress(_varints(values), 9)).decode()


def _varints(values: list[int]) -> bytes:
    """Each value zigzag-encoded in 7-bit groups: a few bytes for what a sample holds."""
    out = bytearray()
    for v in values:
        z = (v << 1) ^ (v >> 63)
        while True:
            low = z & 0x7F
            z >>= 7
            out.append(low | (0x80 if z else 0))
            if not z:
                break
    return bytes(out)


def _ints(data: bytes) -> list[int]:
    values: list[int] = []
    z = shift = 0
    for byte in data:
        z |= (byte & 0x7F) << shift
        shift += 7
        if shift > 70:
            raise Unpackable("packed samples: a value too long")
        if not byte & 0x80:
            values.append((z >> 1) ^ -(z & 1))
            z = shift = 0
    if shift:
        raise Unpackable("packed samples: cut")
    return values


class Unpackable(ValueError):
    """A packed text that is not what :func:`pack` makes."""


def unpack(text: str) -> Vectors:
    try:
        raw = base64.b64decode(text, validate=True)
        inflater = zlib.decompressobj()
        data = inflater.decompress(raw, 10 * (2 + MAX_VALUES))
    except (binascii.Error, zlib.error) as exc:
        raise Unpackable(f"not packed samples ({exc})") from None
    if inflater.unconsumed_tail:
        raise Unpackable("packed samples: too long")
    values = _ints(data)
    if len(values) < 2:
        raise Unpackable("packed samples: no header")
    n, has_spans = values[0], values[1]
    if has_spans not in (0, 1) or not 0 <= n <= MAX_VALUES // 2:
        raise Unpackable("packed samples: a bad header")
    if len(values) != 2 + n * (1 + has_spans):
        raise Unpackable("packed samples: the count does not match")
    seconds = values[2 : 2 + n]
    spans = [s + skew for s, skew in zip(seconds, values[2 + n :], strict=False)]
    if not all(0 <= v <= _MAX_MICROS for v in [*seconds, *spans]):
        raise Unpackable("packed samples: a value out of bounds")
    return Vectors([v / MICRO for v in seconds], [v / MICRO for v in spans] if has_spans else None)
