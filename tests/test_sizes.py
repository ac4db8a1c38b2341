"""Sizes must match the reference's published table, computed without allocating."""

from __future__ import annotations

import pytest

from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.checkpoint.sizes import GIB


def test_reference_table_sizes() -> None:
    # LAYER_SIZE=100000, PADDING_SIZE=196, WORLD_SIZE=4: 18.25 GiB a shard, 73.02 GiB in all.
    size = sizes.checkpoint_size(world_size=4, layer_size=100_000, padding_size=196)
    assert round(size.largest_shard_bytes / GIB, 2) == 18.25
    assert round(size.total_bytes / GIB, 2) == 73.02
    assert size.even
    assert sizes.format_bytes(size.total_bytes) == "73.02 GiB"
    assert sizes.format_bytes(size.largest_shard_bytes) == "18.25 GiB"


@pytest.mark.parametrize(
    ("world_size", "padding_size", "counts"),
    [
        (1, 3, [3]),
        (2, 4, [2, 2]),
        (4, 6, [2, 2, 1, 1]),
        (3, 7, [3, 2, 2]),
        (35, 196, [6] * 21 + [5] * 14),
    ],
)
def test_round_robin_dealing(world_size: int, padding_size: int, counts: list[int]) -> None:
    got = [sizes.tensors_on_rank(r, world_size, padding_size) for r in range(world_size)]
    assert got == counts


def test_every_tensor_owned_exactly_once() -> None:
    world_size, padding_size = 5, 23
    seen = [i for r in range(world_size) for i in sizes.owned_indices(r, world_size, padding_size)]
    assert sorted(seen) == list(range(padding_size))
    assert all(
        i % world_size == r
        for r in range(world_size)
        for i in sizes.owned_indices(r, world_size, padding_size)
    )


def test_uneven_shards_are_reported() -> None:
    size = sizes.checkpoint_size(world_size=4, layer_size=10, padding_size=6)
    assert not size.even
    assert size.largest_shard_bytes == 2 * 10 * 4000
    assert size.smallest_shard_bytes == 10 * 4000
    total = sum(sizes.shard_bytes(r, 4, 10, 6) for r in range(4))
    assert total == size.total_bytes


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 B"), (512, "512 B"), (1536, "1.50 KiB"), (GIB, "1.00 GiB"), (3 * 1024**4, "3.00 TiB")],
)
def test_format_bytes(n: int, text: str) -> None:
    assert sizes.format_bytes(n) == text
