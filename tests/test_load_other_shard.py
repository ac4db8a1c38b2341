"""Each rank loads another rank's shard (MLPerf's read phase: another host taking over)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.rank import state
from tests import workers
from tests.workers import small_config


def test_the_loader_is_the_rank_k_on(tmp_path: Path) -> None:
    config = small_config(str(tmp_path / "c"), world_size=3, padding_size=3, rank=2,
                          load_shard_offset=2)  # fmt: skip
    assert config.load_rank == 1
    assert state.owned_names(config.loader()) == state.owned_names(
        config.model_copy(update={"rank": 1})
    )
    assert small_config(str(tmp_path / "c"), rank=1).loader().rank == 1  # default: its own


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"load_shard_offset": 2},
         "load_shard_offset: .* must not be a multiple of world_size.*"
         "got load_shard_offset=2, model=None, world_size=2"),
        ({"load_shard_offset": 1, "model": "llama3-debug"},
         "load_shard_offset: needs the reference layout"),
    ],
)  # fmt: skip
def test_refusals_name_the_setting(tmp_path: Path, changes: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        small_config(str(tmp_path / "c"), **changes)


def test_the_cr_refuses_the_same_by_name() -> None:
    base = {"worldSize": 2, "layerSize": 10, "paddingSize": 2, "checkpointPath": "gs://bucket/x"}
    CheckpointBenchmarkSpec.model_validate({**base, "loadShardOffset": 1})
    with pytest.raises(ValidationError, match="loadShardOffset needs the reference layout"):
        CheckpointBenchmarkSpec.model_validate({**base, "loadShardOffset": 4})


@pytest.mark.timeout(120)
def test_two_ranks_each_load_and_verify_the_others_shard(tmp_path: Path) -> None:
    # padding 3 on 2 ranks: rank 0 saves tensors 0 and 2, rank 1 tensor 1. Swapped on load, each
    # loads the other's (rank 0 one tensor, rank 1 two) and verifies them bit for bit.
    config = small_config(str(tmp_path / "ckpt"), padding_size=3, load_shard_offset=1)
    ranks = workers.run(config, tmp_path)
    assert [w.proc.returncode for w in ranks] == [0, 0], workers.logs(ranks)
    first, second = (w.result for w in ranks)
    assert first.verified is True and second.verified is True
    assert (first.load_bytes, second.load_bytes) == (second.bytes, first.bytes)
    assert first.bytes == 2 * second.bytes


def test_the_setting_reaches_the_rank(tmp_path: Path) -> None:
    config = small_config(str(tmp_path / "c"), load_shard_offset=1)
    env = config.to_env()
    assert WorkloadConfig.from_env(env).load_shard_offset == 1
