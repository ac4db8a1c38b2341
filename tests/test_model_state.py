"""A model preset's rank state in one process (a gloo group of one): content, dtypes, checks."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import BytesStorageMetadata
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.local.emulator import free_port
from ckptbench.workload.rank import model_state, state
from ckptbench.workload.rank.content import BLOCK
from ckptbench.workload.rank.failures import VerificationError

SMALL_PARTS = {"lr_scheduler", "train_state", "dataloader"}


@pytest.fixture
def group() -> Iterator[None]:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        model_state._mesh.cache_clear()
        dist.destroy_process_group()


def _config(**fields: object) -> WorkloadConfig:
    values: dict[str, object] = {"checkpoint_path": "/tmp/x", "backend": "file", "world_size": 1}
    values.update(model="llama3-debug", layers=1, **fields)
    return WorkloadConfig.model_validate(values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_any_slice_equals_the_same_rows_of_the_whole(dtype: torch.dtype) -> None:
    # What makes a resharded load checkable: content depends on the global index only.
    whole = model_state.fill_slice(torch.empty(3 * BLOCK + 77, dtype=dtype), 5, "k", 0)
    for start, stop in [(0, 10), (BLOCK - 3, BLOCK + 5), (2 * BLOCK + 1, 3 * BLOCK + 77)]:
        part = model_state.fill_slice(torch.empty(stop - start, dtype=dtype), 5, "k", start)
        assert torch.equal(part.view(torch.uint8), whole[start:stop].view(torch.uint8))
    assert torch.isfinite(whole.float()).all()
    other = model_state.fill_slice(torch.empty(3 * BLOCK + 77, dtype=dtype), 5, "k2", 0)
    assert not torch.equal(other.view(torch.uint8), whole.view(torch.uint8))


def test_state_keys_dtypes_and_dtensors(group: None) -> None:
    built = state.build_state(_config(dtype="mlperf"))
    wq = built["layers.0.attention.wq.weight"]
    assert isinstance(wq, DTensor) and wq.dtype == torch.float16 and wq.shape == (256, 256)
    assert built["optimizer.state.layers.0.attention.wq.weight.master"].dtype == torch.float32
    assert not any(k.startswith("optimizer.param_groups") for k in built)
    fp32 = state.build_state(_config())
    assert fp32["optimizer.param_groups.norm.weight.betas"] == (0.9, 0.95)
    assert fp32["optimizer.state.norm.weight.step"].shape == ()
    state.verify(fp32, _config())


def test_a_flipped_bit_an_unread_chunk_and_a_missing_scalar_are_named(group: None) -> None:
    config = _config(dtype="bf16")
    built = state.build_state(config)
    local = built["layers.0.feed_forward.w2.weight"].to_local()
    local.view(-1).view(torch.int16)[1234] ^= 1
    template = state.empty_template(config)
    state.mark_unwritten(template)
    built["optimizer.state.output.weight.exp_avg"] = template[
        "optimizer.state.output.weight.exp_avg"
    ]
    del built["optimizer.param_groups.output.weight.lr"]
    with pytest.raises(VerificationError) as info:
        state.verify(built, config)
    err = info.value
    assert err.rank == 0
    assert err.tensors == [
        "layers.0.feed_forward.w2.weight",
        "optimizer.state.output.weight.exp_avg",
        "optimizer.param_groups.output.weight.lr",
    ]
    assert "1 of 196608 local elements differ, first at global element 1234" in err.details[0]
    assert "expected 0.0008, got '<not loaded>'" in err.details[2]


@pytest.mark.parametrize(("rank", "loads"), [(0, True), (1, True), (2, False), (3, False)])
def test_a_resharded_load_templates_the_load_worlds_rows_only(
    group: None, monkeypatch: pytest.MonkeyPatch, rank: int, loads: bool
) -> None:
    # Saved by 4 ranks, loaded by 2: rank r < 2 holds torch.chunk(x, 2)[r], not its own save
    # rows (a quarter) nor every row; ranks 2 and 3 hold nothing. The mesh is one process's
    # stand-in (a 2-rank mesh needs 2 processes); the local rows are what is checked.
    one = init_device_mesh("cpu", (1,))
    monkeypatch.setattr(model_state, "_mesh", lambda size, world: one)
    config = _config(world_size=4, rank=rank, load_world_size=2, optimizer="none")
    template = state.empty_template(config)
    if not loads:
        assert template == {}
        return
    sharded = {k: v for k, v in template.items() if isinstance(v, DTensor)}
    assert len(sharded) == 12  # one layer: 9 tensors, embeddings, norm, output
    for key, value in sharded.items():
        shape = tuple(value.shape)
        want = torch.chunk(torch.empty(shape, device="meta"), 2)[rank].shape
        assert tuple(value.to_local().shape) == tuple(want), key
    wq = template["layers.0.attention.wq.weight"].to_local()
    assert wq.shape == (256 // 2, 256)


def test_torchtitans_small_items_round_trip_through_dcp_and_are_checked(
    group: None, tmp_path: Path
) -> None:
    config = _config(seed=7)
    built = state.build_state(config)
    step = model_state.train_step(7)
    assert built["lr_scheduler.last_epoch"] == built["train_state.step"] == step
    assert built["train_state.ntokens_seen"] == step * 8 * 8192
    assert built["dataloader.world_size"] == 1
    loader = pickle.loads(built["dataloader.dp_rank_0"])
    assert loader["_num_yielded"] == step and len(loader["dataset_state"]["token_buffer"]) == 4096
    assert model_state.dataloader_state(7, 1) != built["dataloader.dp_rank_0"]  # one per rank
    for bare in (_config(optimizer="none"), _config(dtype="mlperf")):
        small = [k for k in state.build_state(bare) if k.split(".")[0] in SMALL_PARTS]
        assert small == []

    dcp_save(built, checkpoint_id=str(tmp_path / "ckpt"))
    metadata = FileSystemReader(str(tmp_path / "ckpt")).read_metadata()
    for key in ("lr_scheduler.last_epoch", "train_state.ntokens_seen", "dataloader.dp_rank_0"):
        assert isinstance(metadata.state_dict_metadata[key], BytesStorageMetadata)
    template = state.empty_template(config)
    assert template["dataloader.dp_rank_0"] == "<not loaded>"
    dcp_load(template, checkpoint_id=str(tmp_path / "ckpt"))
    state.verify(template, config)

    template["dataloader.dp_rank_0"] = model_state.dataloader_state(7, 1)
    template["train_state.step"] = step + 1
    del template["lr_scheduler.last_epoch"]
    with pytest.raises(VerificationError) as info:
        state.verify(template, config)
    assert info.value.tensors == [
        "lr_scheduler.last_epoch",
        "train_state.step",
        "dataloader.dp_rank_0",
    ]
    assert info.value.details[1] == f"train_state.step: expected {step}, got {step + 1}"
    assert " pickled bytes (" in info.value.details[2]
