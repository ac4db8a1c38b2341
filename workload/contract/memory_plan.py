"""A rank's peak memory, estimated before anything is allocated, and the verdict on a budget.

The timed loop holds one copy of the rank's state at a time: the shard it saves is freed before
the load template is allocated (see ``rank/loop.py``), so the template replaces the shard rather
than adding to it. On top of that: an async save's staging copy (a second copy of the shard
while it uploads), one item-sized buffer (a tensor being serialised, or a saved chunk read whole
and narrowed when a load reshards), the interpreter with torch imported (~350 MiB RSS), and for
a model the checkpoint's ``.metadata``, which every rank reads whole on load (its pickled size: a
lower bound of the objects it unpickles into).
"""

from __future__ import annotations

from dataclasses import dataclass

from ckptbench.workload.contract.quantity import quantity
from ckptbench.workload.contract.sizes import format_bytes

MIB = 1024**2
INTERPRETER_BYTES = 350 * MIB


@dataclass(frozen=True)
class MemoryEstimate:
    shard_bytes: int  # the state the rank saves, then the template it loads into (one at a time)
    staging_bytes: int  # async save: a second copy of the shard
    buffer_bytes: int  # the largest single item in flight
    metadata_bytes: int = 0  # the .metadata every rank reads on load
    interpreter_bytes: int = INTERPRETER_BYTES

    @property
    def peak_bytes(self) -> int:
        return (
            self.interpreter_bytes
            + self.shard_bytes
            + self.staging_bytes
            + self.buffer_bytes
            + self.metadata_bytes
        )

    def breakdown(self) -> str:
        parts = [f"shard or load template {format_bytes(self.shard_bytes)}"]
        if self.staging_bytes:
            parts.append(f"async staging copy {format_bytes(self.staging_bytes)}")
        parts.append(f"largest item buffer {format_bytes(self.buffer_bytes)}")
        if self.metadata_bytes:
            parts.append(f".metadata {format_bytes(self.metadata_bytes)}")
        parts.append(f"interpreter with torch {format_bytes(self.interpreter_bytes)}")
        return " + ".join(parts)


def estimate(
    shard_bytes: int, largest_item_bytes: int, async_save: bool, metadata_bytes: int = 0
) -> MemoryEstimate:
    return MemoryEstimate(
        shard_bytes=shard_bytes,
        staging_bytes=shard_bytes if async_save else 0,
        buffer_bytes=largest_item_bytes,
        metadata_bytes=metadata_bytes,
    )


class MemoryRefused(RuntimeError):
    """The run cannot fit; the message gives the numbers and the way out."""


def refusal(
    est: MemoryEstimate, budget_bytes: int, budget_source: str, way_out: str, force: str
) -> str | None:
    """Why the run does not fit in ``budget_bytes``, or None when it does."""
    if est.peak_bytes <= budget_bytes:
        return None
    return (
        f"a rank needs about {format_bytes(est.peak_bytes)} ({est.breakdown()}) but has "
        f"{format_bytes(budget_bytes)} ({budget_source}); {way_out}, or force the run with "
        f"{force} (it will likely be killed for lack of memory)"
    )


def parse_quantity(text: str) -> int:
    """A Kubernetes memory quantity (``64Gi``, ``500M``, ``1e9``, ``128974848``) in bytes."""
    try:
        return int(quantity(text))
    except ValueError:
        raise ValueError(f"not a memory quantity: {text!r}") from None
