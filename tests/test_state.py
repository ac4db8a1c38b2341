"""The synthetic state: reference shapes and ownership, deterministic content, exact checks."""

from __future__ import annotations

import pytest
import torch

from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.rank import content, failures, state


def _config(**kw: object) -> WorkloadConfig:
    base: dict[str, object] = {
        "checkpoint_path": "/tmp/unused",
        "backend": "file",
        "layer_size": 300,
        "padding_size": 6,
        "world_size": 2,
    }
    base.update(kw)
    return WorkloadConfig.model_validate(base)


def test_keys_shapes_and_bytes_follow_round_robin_ownership() -> None:
    for rank in range(3):
        config = _config(world_size=3, padding_size=7, rank=rank)
        shard = state.build_state(config)
        assert list(shard) == [f"dummy_tensor_{i}" for i in range(rank, 7, 3)]
        assert all(t.shape == (300, 1000) and t.dtype == torch.float32 for t in shard.values())
        assert sum(t.numel() * t.element_size() for t in shard.values()) == config.shard_bytes
        assert config.shard_bytes == sizes.shard_bytes(rank, 3, 300, 7)


def test_uneven_shards_cover_every_tensor_exactly_once() -> None:
    configs = [_config(world_size=4, padding_size=10, rank=r) for r in range(4)]
    names = [name for c in configs for name in state.build_state(c)]
    assert sorted(names) == sorted(f"dummy_tensor_{i}" for i in range(10))
    assert [len(state.owned_names(c)) for c in configs] == [3, 3, 2, 2]
    total = sum(c.shard_bytes for c in configs)
    assert total == configs[0].total_bytes


def test_content_is_deterministic_and_differs_by_index_and_seed() -> None:
    a = state.build_state(_config())
    b = state.build_state(_config())
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["dummy_tensor_0"], a["dummy_tensor_2"])
    other_seed = state.build_state(_config(seed=1))
    assert not torch.equal(a["dummy_tensor_0"], other_seed["dummy_tensor_0"])
    # Each chunk carries its own offset: a tensor is not a repetition of one block.
    flat = a["dummy_tensor_0"].view(-1)
    assert not torch.equal(flat[: content.BLOCK], flat[content.BLOCK : 2 * content.BLOCK])


def test_values_are_exact_integers_in_float32() -> None:
    t = state.build_state(_config())["dummy_tensor_0"]
    assert torch.equal(t, t.round())
    assert float(t.min()) >= 1.0 and float(t.max()) < 2.0**23


def test_verify_accepts_built_state() -> None:
    config = _config(rank=1)
    state.verify(state.build_state(config), config)


@pytest.mark.parametrize("where", [0, 123_457, 300 * 1000 - 1])
def test_verify_catches_one_flipped_bit_anywhere(where: int) -> None:
    config = _config(rank=1)
    shard = state.build_state(config)
    ints = shard["dummy_tensor_3"].view(-1).view(torch.int32)
    ints[where] ^= 1  # the lowest mantissa bit: the smallest change float32 can show
    with pytest.raises(failures.VerificationError) as info:
        state.verify(shard, config)
    err = info.value
    assert err.tensors == ["dummy_tensor_3"] and err.rank == 1
    message = str(err)
    assert "dummy_tensor_3 on rank 1" in message
    assert f"1 of 300000 elements differ, first at element {where}" in message


def test_verify_names_every_bad_tensor_and_missing_or_foreign_keys() -> None:
    config = _config(world_size=2, padding_size=6, rank=0)
    shard = state.build_state(config)
    shard["dummy_tensor_2"].zero_()
    del shard["dummy_tensor_4"]
    shard["dummy_tensor_1"] = torch.zeros(300, 1000)
    with pytest.raises(failures.VerificationError) as info:
        state.verify(shard, config)
    assert sorted(info.value.tensors) == ["dummy_tensor_1", "dummy_tensor_2", "dummy_tensor_4"]
    assert "dummy_tensor_4: missing" in str(info.value)
    assert "not a key of this rank" in str(info.value)


def test_verify_rejects_a_wrong_shape() -> None:
    config = _config(rank=0)
    shard = state.build_state(config)
    shard["dummy_tensor_0"] = shard["dummy_tensor_0"][:-1]
    with pytest.raises(failures.VerificationError, match=r"dummy_tensor_0: expected float32"):
        state.verify(shard, config)


def test_verify_detects_a_tensor_stored_under_another_name() -> None:
    config = _config(world_size=1, padding_size=2, rank=0)
    shard = state.build_state(config)
    shard["dummy_tensor_0"], shard["dummy_tensor_1"] = (
        shard["dummy_tensor_1"],
        shard["dummy_tensor_0"],
    )
    with pytest.raises(failures.VerificationError) as info:
        state.verify(shard, config)
    assert info.value.tensors == ["dummy_tensor_0", "dummy_tensor_1"]


def test_empty_template_has_the_rank_keys_and_shapes_only() -> None:
    config = _config(world_size=3, padding_size=7, rank=2)
    template = state.empty_template(config)
    assert list(template) == ["dummy_tensor_2", "dummy_tensor_5"]
    assert all(t.shape == (300, 1000) and t.dtype == torch.float32 for t in template.values())
    for index, name in ((2, "dummy_tensor_2"), (5, "dummy_tensor_5")):
        state.fill_expected(template[name], config.seed, index)
    state.verify(template, config)


def test_a_load_that_skips_a_chunk_fails_even_on_reused_memory() -> None:
    # Memory that already holds the expected values (the shard just saved) must not pass for a
    # load that wrote nothing into one chunk.
    config = _config(world_size=1, layer_size=600, padding_size=2)
    template = state.build_state(config)
    state.mark_unwritten(template)
    skipped = template["dummy_tensor_1"].view(-1)
    for name, tensor in template.items():
        index = int(name.rsplit("_", 1)[1])
        state.fill_expected(tensor, config.seed, index)
    # Rewrite everything but the second chunk of one tensor with a fresh mark.
    skipped[content.BLOCK] = float("nan")
    with pytest.raises(failures.VerificationError, match=r"dummy_tensor_1 on rank 0"):
        state.verify(template, config)


def test_marked_template_fully_written_verifies() -> None:
    config = _config(world_size=1, layer_size=600, padding_size=2)
    template = state.empty_template(config)
    state.mark_unwritten(template)
    for index, name in enumerate(template):
        assert torch.isnan(template[name].view(-1)[:: content.BLOCK]).all()
        state.fill_expected(template[name], config.seed, index)
    state.verify(template, config)
