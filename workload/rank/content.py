"""What both synthetic layouts are made of: the block size and the hash of the offsets.

The reference layout (:mod:`.state`) and a model preset's (:mod:`.model_state`) fill their tensors
the same way: a seeded random block of ``BLOCK`` elements, plus an offset per block hashed with
:func:`splitmix64` from the seed, the tensor and the block's place, so that any rank can compute
what any slice must hold.
"""

from __future__ import annotations

BLOCK = 1 << 18  # elements: 1 MiB of float32, small enough to stay in cache while we stream
_MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)
