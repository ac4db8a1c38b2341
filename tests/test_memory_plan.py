"""The memory estimate and the refusal message, pure and before anything is allocated."""

from __future__ import annotations

import pytest

from ckptbench.workload.contract import memory_plan
from ckptbench.workload.contract.config import WorkloadConfig

GIB = 1024**3
MIB = 1024**2


def test_peak_adds_shard_staging_buffer_and_interpreter() -> None:
    sync = memory_plan.estimate(10 * GIB, 100 * MIB, async_save=False)
    assert sync.peak_bytes == 10 * GIB + 100 * MIB + 350 * MIB
    assync = memory_plan.estimate(10 * GIB, 100 * MIB, async_save=True)
    assert assync.peak_bytes == 20 * GIB + 100 * MIB + 350 * MIB
    assert "async staging copy 10.00 GiB" in assync.breakdown()
    assert "staging" not in sync.breakdown()


def test_refusal_gives_the_numbers_and_the_way_out() -> None:
    est = memory_plan.estimate(10 * GIB, 0, async_save=False)
    assert memory_plan.refusal(est, est.peak_bytes, "limit", "use more ranks", "--force") is None
    text = memory_plan.refusal(
        est, est.peak_bytes - 1, "the pod's limit", "use more ranks", "--force"
    )
    assert text is not None
    assert "needs about 10.34 GiB" in text and "has 10.34 GiB (the pod's limit)" in text
    assert "use more ranks, or force the run with --force" in text


def test_the_reference_table_on_four_ranks_needs_over_18_gib_a_rank() -> None:
    config = WorkloadConfig(
        checkpoint_path="/tmp/x", backend="file", world_size=4, layer_size=100_000,
        padding_size=196,
    )  # fmt: skip
    est = config.memory_estimate()
    assert est.shard_bytes == 49 * 100_000 * 4000  # 49 tensors on rank 0
    assert est.buffer_bytes == 100_000 * 4000
    assert est.peak_bytes > 18.25 * GIB


def test_model_estimate_uses_the_largest_rank() -> None:
    config = WorkloadConfig(
        checkpoint_path="/tmp/x", backend="file", world_size=8, model="llama3-8b", rank=7
    )
    est = config.memory_estimate()
    assert round(est.shard_bytes / GIB, 2) == 11.22  # rank 0's, whatever this rank is
    assert est.buffer_bytes == 16032 * 4096 * 4  # ceil(128256 / 8) embedding rows in fp32


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("64Gi", 64 * GIB),
        ("512Mi", 512 * MIB),
        ("1G", 10**9),
        ("500M", 500 * 10**6),
        ("128974848", 128974848),
        ("1e9", 10**9),
        ("1.5Gi", 3 * GIB // 2),
        ("2k", 2000),
    ],
)
def test_kubernetes_quantities(text: str, value: int) -> None:
    assert memory_plan.parse_quantity(text) == value


def test_a_bad_quantity_is_named() -> None:
    with pytest.raises(ValueError, match="not a memory quantity: 'lots'"):
        memory_plan.parse_quantity("lots")


def test_a_models_metadata_counts_because_every_rank_reads_it() -> None:
    config = WorkloadConfig(
        checkpoint_path="/tmp/x", backend="file", world_size=512, model="llama3-405b"
    )
    est = config.memory_estimate()
    assert est.metadata_bytes > 300 * 10**6  # 1137 x 3 sharded tensors x 512 chunks
    assert est.peak_bytes == (est.shard_bytes + est.buffer_bytes + est.metadata_bytes + 350 * MIB)
    assert ".metadata 3" in est.breakdown()
