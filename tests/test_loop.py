"""The timed loop in this process: one rank, no process group, real DCP on a local folder."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.state_dict_loader import load as real_load

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.rank import loop, operations, state
from ckptbench.workload.storage import objects as objectio
from tests.workers import one_rank


def _config(tmp_path: Path, **kw: object) -> WorkloadConfig:
    return one_rank(tmp_path, **{"warmup_samples": 1, **kw})


def _quiet(lines: list[str]) -> Callable[[str], None]:
    return lines.append


def test_samples_are_timed_verified_and_cleaned_up(tmp_path: Path) -> None:
    config = _config(tmp_path)
    seen: list[str] = []
    lines: list[str] = []

    def after_save(sample: int, checkpoint_id: str) -> None:
        seen.append(checkpoint_id)
        assert sorted(os.listdir(checkpoint_id)) == [".metadata", "__0_0.distcp"]

    result = loop.run(config, after_save=after_save, log=_quiet(lines))
    assert result.error is None and result.verified is True
    assert result.bytes == 3 * 500 * 1000 * 4
    assert result.save is not None and result.save.stats.n == 2
    assert result.load is not None and result.load.seconds is not None
    assert all(
        s >= o for s, o in zip(result.load.seconds, result.load.io_seconds or [], strict=True)
    )
    # A fresh checkpoint id per sample, warm-up included.
    assert seen == [config.checkpoint_id(i) for i in range(3)]
    assert objectio.list_names(f"{config.run_path}/checkpoints") == []
    assert lines[0].startswith("[rank 0] save warm-up 1/1: ")
    assert lines[2].startswith("[rank 0] save 1/2: ") and lines[2].endswith(" s)")
    assert " s (I/O " in lines[2]


def test_keep_checkpoints_leaves_every_sample(tmp_path: Path) -> None:
    config = _config(tmp_path, keep_checkpoints=True, warmup_samples=0, verify=False)
    result = loop.run(config, log=_quiet([]))
    assert result.error is None and result.verified is None
    for sample in range(2):
        assert objectio.list_names(config.checkpoint_id(sample)) == [".metadata", "__0_0.distcp"]


def test_a_flipped_byte_on_storage_fails_verification(tmp_path: Path) -> None:
    config = _config(tmp_path, warmup_samples=0)

    def corrupt(sample: int, checkpoint_id: str) -> None:
        from tests.workers import _corrupt

        if sample == 1:
            _corrupt(checkpoint_id, "dummy_tensor_2")

    result = loop.run(config, after_save=corrupt, log=_quiet([]))
    assert result.verified is False
    assert result.error is not None
    assert result.error.startswith("VerificationError: dummy_tensor_2 on rank 0: ")
    assert result.load is not None and result.load.stats.n == 2  # the bad load was timed


def test_a_missing_shard_file_fails_the_load_naming_it(tmp_path: Path) -> None:
    config = _config(tmp_path, warmup_samples=0)

    def delete(sample: int, checkpoint_id: str) -> None:
        Path(checkpoint_id, "__0_0.distcp").unlink()

    result = loop.run(config, after_save=delete, log=_quiet([]))
    assert result.error is not None
    assert result.error.startswith("CheckpointFailure: load failed on rank 0: FileNotFoundError")
    assert "__0_0.distcp" in result.error
    assert result.load is None and result.save is not None


def test_a_failing_async_save_is_reported_not_timed_as_a_success(tmp_path: Path) -> None:
    config = _config(tmp_path, async_save=True, warmup_samples=0)
    # A file where the checkpoint folder must go: the upload, not the call, fails.
    blocker = Path(config.checkpoint_id(0))
    blocker.parent.mkdir(parents=True)
    blocker.write_text("in the way")
    result = loop.run(config, log=_quiet([]))
    assert result.error is not None and result.save is None
    assert result.error.startswith(
        "CheckpointFailure: save failed on rank 0: FileExistsError: [Errno 17] File exists"
    ), result.error


def test_async_save_records_blocked_and_durable_seconds(tmp_path: Path) -> None:
    config = _config(tmp_path, async_save=True, warmup_samples=0)
    lines: list[str] = []
    result = loop.run(config, log=_quiet(lines))
    assert result.error is None and result.verified is True
    assert result.save is not None and result.save.blocked_seconds is not None
    assert len(result.save.blocked_seconds) == 2
    assert ", blocked " in lines[0]


def test_tensors_with_a_partial_last_chunk_round_trip(tmp_path: Path) -> None:
    config = _config(tmp_path, layer_size=263, sample_count=1, warmup_samples=0)
    result = loop.run(config, log=_quiet([]))
    assert result.error is None and result.verified is True


@pytest.mark.parametrize("procedure", ["ckptbench", "reference"])
def test_every_load_starts_on_a_template_touched_and_marked_outside_its_timing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, procedure: str
) -> None:
    # Every element NaN when DCP starts loading: every page of the destination was touched
    # before the timed region, and any element the load skips fails verification.
    config = _config(tmp_path, procedure=procedure, warmup_samples=0)
    real_mark, real_timed = state.mark_unwritten, loop._Loop._timed
    seen: list[str] = []

    def load(template: dict[str, torch.Tensor], **kw: Any) -> None:
        seen.append(f"load on NaN {all(bool(torch.isnan(t).all()) for t in template.values())}")
        real_load(template, **kw)

    def mark(template: dict[str, torch.Tensor]) -> None:
        seen.append("mark")
        real_mark(template)

    def timed(self: Any, what: str, *args: Any) -> Any:
        seen.append(f"timed {what}")
        return real_timed(self, what, *args)

    monkeypatch.setattr(operations, "dcp_load", load)
    monkeypatch.setattr(state, "mark_unwritten", mark)
    monkeypatch.setattr(loop._Loop, "_timed", timed)
    result = loop.run(config, log=_quiet([]))
    assert result.error is None and result.verified is True
    loads = [e for e in seen if e not in ("timed save", "timed delete")]
    assert loads == ["mark", "timed load", "load on NaN True"] * 2


def test_a_load_that_skips_one_element_of_a_reused_template_fails_verification(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reused template still holds the first load's (correct) values when the second starts.
    config = _config(tmp_path, procedure="reference", warmup_samples=0)
    loads: list[int] = []

    def skipping(template: dict[str, torch.Tensor], **kw: Any) -> None:
        loads.append(1)
        flat = template["dummy_tensor_1"].view(-1)
        before = flat[12345].clone()  # not on a BLOCK boundary
        real_load(template, **kw)
        if len(loads) == 2:
            flat[12345] = before  # as if the reader never wrote it

    monkeypatch.setattr(operations, "dcp_load", skipping)
    result = loop.run(config, log=_quiet([]))
    assert result.verified is False
    assert result.error is not None and "dummy_tensor_1 on rank 0" in result.error
