"""Checkpoint sizes of the reference's synthetic state, computed without allocating anything.

The reference builds ``padding_size`` float32 tensors of shape ``(layer_size, 1000)`` and deals
tensor ``i`` to rank ``i % world_size``.
"""

from __future__ import annotations

from dataclasses import dataclass

COLUMNS = 1000
FLOAT32_BYTES = 4
GIB = 1024**3


def tensor_bytes(layer_size: int) -> int:
    return layer_size * COLUMNS * FLOAT32_BYTES


def owned_indices(rank: int, world_size: int, padding_size: int) -> range:
    """The tensor indices rank ``rank`` owns under round-robin dealing."""
    return range(rank, padding_size, world_size)


def tensors_on_rank(rank: int, world_size: int, padding_size: int) -> int:
    return len(owned_indices(rank, world_size, padding_size))


def shard_bytes(rank: int, world_size: int, layer_size: int, padding_size: int) -> int:
    return tensors_on_rank(rank, world_size, padding_size) * tensor_bytes(layer_size)


def total_bytes(layer_size: int, padding_size: int) -> int:
    return padding_size * tensor_bytes(layer_size)


@dataclass(frozen=True)
class CheckpointSize:
    world_size: int
    total_bytes: int
    largest_shard_bytes: int
    smallest_shard_bytes: int

    @property
    def even(self) -> bool:
        return self.largest_shard_bytes == self.smallest_shard_bytes


def checkpoint_size(world_size: int, layer_size: int, padding_size: int) -> CheckpointSize:
    largest = shard_bytes(0, world_size, layer_size, padding_size)
    smallest = shard_bytes(world_size - 1, world_size, layer_size, padding_size)
    return CheckpointSize(
        world_size=world_size,
        total_bytes=total_bytes(layer_size, padding_size),
        largest_shard_bytes=largest,
        smallest_shard_bytes=smallest,
    )


def format_bytes(n: float) -> str:
    """1024-based units, labelled as such (GiB, not GB), as the reference's table uses."""
    for unit, scale in (("TiB", 1024**4), ("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"
