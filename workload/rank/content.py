"""What both synthetic layouts are made of, and how a wrong load is reported.

The reference layout (:mod:`.state`) and a model preset's (:mod:`.model_state`) fill their tensors
the same way: a seeded random block of ``BLOCK`` elements, plus an offset per block hashed with
:func:`splitmix64` from the seed, the tensor and the block's place. Both check a load against it
and raise :class:`VerificationError` naming every tensor at fault.
"""

from __future__ import annotations

from collections.abc import Sequence

BLOCK = 1 << 18  # elements: 1 MiB of float32, small enough to stay in cache while we stream
_MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class VerificationError(AssertionError):
    """Loaded tensors differ from what was saved. Names the rank and every tensor at fault."""

    def __init__(self, rank: int, tensors: Sequence[str], details: Sequence[str]) -> None:
        self.rank = rank
        self.tensors = list(tensors)
        self.details = list(details)
        shown = ", ".join(self.tensors[:8]) + (" ..." if len(self.tensors) > 8 else "")
        super().__init__(f"{shown} on rank {rank}: " + "; ".join(self.details[:8]))
