"""Model presets: counts and sizes against independent arithmetic and the published figures."""

from __future__ import annotations

import math

import pytest
import torch

from ckptbench.workload.contract.checkpoint import models
from ckptbench.workload.contract.checkpoint.models import DtypeProfile, ModelSpec, Optimizer
from ckptbench.workload.contract.checkpoint.sizes import GIB

# (dim, layers, heads, kv heads, vocab, ffn) from torchtitan's llama3 args, ffn as published.
SHAPES = {
    "llama3-debug": (256, 6, 16, 16, 2048, 768),
    "llama3-8b": (4096, 32, 32, 8, 128256, 14336),
    "llama3-70b": (8192, 80, 64, 8, 128256, 28672),
    "mlperf-llama3-70b": (8192, 80, 128, 8, 128256, 28672),
    "llama3-405b": (16384, 126, 128, 8, 128256, 53248),
}
PUBLISHED_PARAMS = {
    "llama3-debug": 6_163_712,
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "mlperf-llama3-70b": 69_882_617_856,
    "llama3-405b": 405_853_388_800,
}
PUBLISHED_TENSORS = {
    "llama3-debug": 57,
    "llama3-8b": 291,
    "llama3-70b": 723,
    "mlperf-llama3-70b": 723,
    "llama3-405b": 1137,
}


def _closed_form(dim: int, layers: int, heads: int, kv: int, vocab: int, ffn: int) -> int:
    hd = dim // heads
    per_layer = 2 * dim * heads * hd + 2 * dim * kv * hd + 3 * dim * ffn + 2 * dim
    return 2 * vocab * dim + layers * per_layer + dim


@pytest.mark.parametrize("preset", list(SHAPES))
def test_parameter_counts_equal_the_published_ones(preset: str) -> None:
    arch = models.architecture(preset)
    dim, layers, heads, kv, vocab, ffn = SHAPES[preset]
    assert (arch.dim, arch.n_layers, arch.n_heads, arch.n_kv_heads, arch.vocab_size) == (
        dim,
        layers,
        heads,
        kv,
        vocab,
    )
    assert arch.ffn_dim == ffn
    assert models.parameter_count(arch) == PUBLISHED_PARAMS[preset]
    assert _closed_form(*SHAPES[preset]) == PUBLISHED_PARAMS[preset]
    assert len(models.parameters(arch)) == PUBLISHED_TENSORS[preset] == 9 * layers + 3


def test_torchtitan_key_names_and_shapes() -> None:
    spec = ModelSpec("llama3-8b", layers=1)
    keys = {t.key: t for t in models.state_tensors(spec)}
    assert keys["tok_embeddings.weight"].shape == (128256, 4096)
    assert keys["layers.0.attention.wk.weight"].shape == (1024, 4096)
    assert keys["layers.0.feed_forward.w2.weight"].shape == (4096, 14336)
    assert keys["optimizer.state.output.weight.exp_avg_sq"].dtype == "float32"
    step = keys["optimizer.state.norm.weight.step"]
    assert step.shape == () and not step.sharded
    groups = models.param_group_keys(spec)
    assert len(groups) == 12 * 12  # 12 parameters x 12 scalars
    assert "optimizer.param_groups.layers.0.attention.wq.weight.initial_lr" in groups
    assert not any("freqs_cis" in k for k in keys)  # a non-persistent buffer


def _rank0_bytes_independent(preset: str, n: int, weight: int, moments: int) -> int:
    """Rank 0 holds ceil(d0 / n) rows of every parameter, plus one 4-byte step per parameter."""
    dim, layers, heads, kv, vocab, ffn = SHAPES[preset]
    hd = dim // heads
    shapes = [(vocab, dim), (vocab, dim), (dim, 1)]
    shapes += [(heads * hd, dim), (kv * hd, dim), (kv * hd, dim), (dim, heads * hd)] * layers
    shapes += [(ffn, dim), (dim, ffn), (ffn, dim), (dim, 1), (dim, 1)] * layers
    rows = sum(math.ceil(d0 / n) * cols for d0, cols in shapes)
    steps = 4 * len(shapes) if moments == 8 else 0  # the fp32 profile's AdamW step tensors
    return rows * (weight + moments) + steps


@pytest.mark.parametrize("preset", list(SHAPES))
@pytest.mark.parametrize("n", [8, 64])
def test_rank_bytes_at_8_and_64_ranks(preset: str, n: int) -> None:
    fp32 = models.model_sizes(ModelSpec(preset), n)
    assert fp32.largest_rank_bytes == _rank0_bytes_independent(preset, n, 4, 8)
    mlperf = models.model_sizes(ModelSpec(preset, dtype=DtypeProfile.MLPERF), n)
    assert mlperf.largest_rank_bytes == _rank0_bytes_independent(preset, n, 2, 12)
    bare = models.model_sizes(ModelSpec(preset, optimizer=Optimizer.NONE), n)
    assert bare.largest_rank_bytes == _rank0_bytes_independent(preset, n, 4, 0)
    assert bare.items_per_rank == PUBLISHED_TENSORS[preset]


# The table of rank-0 GiB in models.md (titan / mlperf), rounded to 2 decimals.
RANK0_GIB = {
    ("llama3-8b", 8): (11.22, 13.09),
    ("llama3-8b", 64): (1.40, 1.64),
    ("llama3-8b", 512): (0.18, 0.20),
    ("llama3-70b", 8): (98.56, 114.99),
    ("llama3-70b", 64): (12.32, 14.37),
    ("llama3-70b", 512): (1.54, 1.80),
    ("llama3-405b", 8): (566.97, 661.47),
    ("llama3-405b", 64): (70.87, 82.68),
    ("llama3-405b", 512): (8.86, 10.34),
}


@pytest.mark.parametrize(("preset", "n"), list(RANK0_GIB))
def test_rank0_gib_match_the_published_table(preset: str, n: int) -> None:
    titan, mlperf = RANK0_GIB[(preset, n)]
    got = models.model_sizes(ModelSpec(preset), n).largest_rank_bytes / GIB
    got_mlperf = (
        models.model_sizes(ModelSpec(preset, dtype=DtypeProfile.MLPERF), n).largest_rank_bytes / GIB
    )
    assert (round(got, 2), round(got_mlperf, 2)) == (titan, mlperf)


@pytest.mark.parametrize(
    ("preset", "n", "gib", "per_rank"),
    [
        ("llama3-8b", 8, 104.7, 13.09),
        ("mlperf-llama3-70b", 64, 911.2, 14.24),
        ("llama3-405b", 512, 5291.7, None),
    ],
)
def test_mlperf_profile_totals_equal_mlperf_storage(
    preset: str, n: int, gib: float, per_rank: float | None
) -> None:
    s = models.model_sizes(ModelSpec(preset, dtype=DtypeProfile.MLPERF), n)
    assert s.total_bytes == 14 * PUBLISHED_PARAMS[preset]  # to the byte: no small items
    assert round(s.total_bytes / GIB, 1) == gib
    if per_rank is not None:
        assert round(s.total_bytes / n / GIB, 2) == per_rank


def test_bytes_per_parameter_of_each_profile() -> None:
    p = PUBLISHED_PARAMS["llama3-8b"]
    tensors = PUBLISHED_TENSORS["llama3-8b"]

    def total(opt: Optimizer, dtype: DtypeProfile) -> int:
        return models.model_sizes(ModelSpec("llama3-8b", optimizer=opt, dtype=dtype), 8).total_bytes

    assert total(Optimizer.ADAMW, DtypeProfile.FP32) == 12 * p + 4 * tensors
    assert total(Optimizer.ADAMW, DtypeProfile.BF16) == 6 * p + 4 * tensors
    assert total(Optimizer.NONE, DtypeProfile.BF16) == 2 * p
    assert total(Optimizer.NONE, DtypeProfile.FP32) == 4 * p


@pytest.mark.parametrize(
    ("d0", "n"), [(5, 4), (3, 8), (8, 4), (7, 3), (1, 4), (1024, 512), (128256, 512), (10, 7)]
)
def test_shards_follow_torch_chunk_including_uneven_and_empty(d0: int, n: int) -> None:
    pieces = torch.chunk(torch.arange(d0), n)
    want = [(int(p[0]), len(p)) for p in pieces] + [(d0, 0)] * (n - len(pieces))
    assert [models.chunk_rows(d0, n, r) for r in range(n)] == want


def test_empty_shards_are_counted_and_sized() -> None:
    # 3 rows of dim 0 over 8 ranks: ranks 3..7 hold nothing.
    spec = ModelSpec("llama3-debug", layers=1, vocab=3, optimizer=Optimizer.NONE)
    s = models.model_sizes(spec, 8)
    assert s.empty_shards == 2 * 5  # tok_embeddings and output
    t = next(t for t in models.state_tensors(spec) if t.key == "output.weight")
    assert models.local_shape(t, 8, 2) == (1, 256)
    assert models.local_shape(t, 8, 3) == (0, 256)
    # llama3-8b at 512 ranks: c = 251 rows, so the last rank has no embedding or output rows.
    assert models.model_sizes(ModelSpec("llama3-8b"), 512).empty_shards == 2 * 3
    total = sum(models.rank_bytes(models.state_tensors(spec), 8, r) for r in range(8))
    assert total == s.total_bytes


def test_overrides_and_scaled_down_variant() -> None:
    small = models.model_sizes(ModelSpec("llama3-8b", layers=1, vocab=32768), 1)
    assert small.parameters == 486_551_552
    assert small.parameter_tensors == 12
    assert round(small.total_bytes / GIB, 2) == 5.44
    with pytest.raises(models.ModelError, match=r"^layers: "):
        models.architecture("llama3-8b", layers=0)
    with pytest.raises(models.ModelError, match=r"^model: unknown preset 'gpt2'"):
        models.architecture("gpt2")


def test_item_counts_and_metadata_grow_with_tensors_times_ranks() -> None:
    spec = ModelSpec("llama3-8b")
    s8, s64 = models.model_sizes(spec, 8), models.model_sizes(spec, 64)
    assert s8.sharded_tensors == 3 * 291 and s8.replicated_tensors == 291
    # 12 pickled scalars per parameter, 4 small items on every rank, 1 dataloader state a rank.
    assert s8.byte_items == 12 * 291 + 4 and s8.rank_byte_items == 1
    assert s8.items_per_rank == 291 * 4 + 12 * 291 + 4 + 1
    assert s64.stored_items == 3 * 291 * 64 + 291 + 12 * 291 + 4 + 64
    grown = s64.metadata_bytes - s8.metadata_bytes
    # Each extra (tensor, rank) pair adds a chunk and a storage entry naming the key.
    assert 56 * 3 * 291 * 100 < grown < 56 * 3 * 291 * 300
