"""Named procedures: what each runs, in which order, and the figures each reports."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from torch.distributed.checkpoint.storage import StorageReader

from ckptbench.workload.contract.choices import Procedure
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results.figures import summarize
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from ckptbench.workload.rank import loop, operations, state
from ckptbench.workload.storage import timing
from tests.workers import one_rank


def _config(tmp_path: Path, **kw: object) -> WorkloadConfig:
    return one_rank(tmp_path, **{"layer_size": 100, "padding_size": 2, **kw})


def _trace(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record saves (after-save hook), loads (reader made) and template allocations, in order."""
    events: list[str] = []
    real_reader = timing.timed_reader
    real_template = state.empty_template

    def reader(inner: StorageReader, where: str = "") -> timing.TimedReader:
        events.append("load " + Path(str(inner.path)).name)  # type: ignore[attr-defined]
        return real_reader(inner, where)

    def template(config: WorkloadConfig) -> dict[str, torch.Tensor]:
        events.append("template")
        return real_template(config)

    monkeypatch.setattr(timing, "timed_reader", reader)
    monkeypatch.setattr(state, "empty_template", template)
    return events


def _after_save(events: list[str]) -> operations.AfterSave:
    return lambda sample, checkpoint_id: events.append("save " + Path(checkpoint_id).name)


def test_ckptbench_interleaves_and_loads_into_fresh_templates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _trace(monkeypatch)
    result = loop.run(_config(tmp_path, warmup_samples=1), after_save=_after_save(events))
    assert result.error is None and result.procedure is Procedure.CKPTBENCH
    assert events == [
        *("save ckpt_0.ckpt", "template", "load ckpt_0.ckpt"),
        *("save ckpt_1.ckpt", "template", "load ckpt_1.ckpt"),
        *("save ckpt_2.ckpt", "template", "load ckpt_2.ckpt"),
    ]
    assert result.save is not None and result.save.stats.n == 2  # the warm-up is not timed


@pytest.mark.parametrize(("procedure", "samples"), [("reference", 3), ("mlperf", 10)])
def test_saves_then_loads_into_one_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, procedure: str, samples: int
) -> None:
    events = _trace(monkeypatch)
    config = _config(tmp_path, procedure=procedure, sample_count=samples)
    result = loop.run(config, after_save=_after_save(events))
    assert result.error is None and result.verified is True
    assert result.procedure == procedure
    names = [f"ckpt_{i}.ckpt" for i in range(samples)]
    assert events == [f"save {n}" for n in names] + ["template"] + [f"load {n}" for n in names]
    for op in (result.save, result.load):
        assert op is not None and op.stats.n == samples
        assert op.started_at is not None and op.ended_at is not None
        assert all(s < e for s, e in zip(op.started_at, op.ended_at, strict=True))
    summary = summarize([result], 1, config.total_bytes)
    assert summary.procedure == procedure
    assert summary.save is not None and result.save is not None
    assert summary.save.rank0_mean_seconds == result.save.stats.mean
    if procedure == "mlperf":
        assert summary.mlperf is not None
        for key in (
            "checkpoint_size_GB",
            "save_checkpoint_duration_mean_seconds",
            "save_checkpoint_io_mean_GB_per_second",
            "load_checkpoint_io_stdev_GB_per_second",
            "checkpoint_write_bw_gibps",
            "checkpoint_read_duration_secs",
            "checkpoint_write_min_rank_gibps",
            "checkpoint_read_median_rank_gibps",
        ):
            assert key in summary.mlperf
    else:
        assert summary.mlperf is None


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"procedure": "reference", "warmup_samples": 1}, "warmup_samples"),
        ({"procedure": "mlperf", "sample_count": 8}, "sample_count"),
        ({"procedure": "nope"}, "procedure"),
    ],
)
def test_procedure_settings_are_checked_naming_the_field(
    tmp_path: Path, values: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        _config(tmp_path, **values)
    assert field in str(info.value)


def _spanned(rank: int, starts: list[float], ends: list[float]) -> RankResult:
    seconds = [e - s for s, e in zip(starts, ends, strict=True)]
    t = OpTiming.of(seconds, seconds, started_at=starts, ended_at=ends)
    return RankResult(rank=rank, bytes=2**30, save=t, load=t, procedure=Procedure.MLPERF)


def test_mlperf_duration_is_latest_end_minus_earliest_start() -> None:
    # Sample 0: rank 0 starts at 100, rank 1 ends at 104 -> 4 s; sample 1: 110 .. 112 -> 2 s.
    ranks = [
        _spanned(0, [100.0, 110.0], [103.0, 112.0]),
        _spanned(1, [101.0, 110.5], [104.0, 111.0]),
    ]
    s = summarize(ranks, world_size=2, total_bytes=2 * 2**30)
    assert s.save is not None and s.save.span_mean_seconds == pytest.approx(3.0)
    assert s.mlperf is not None
    assert s.mlperf["checkpoint_write_duration_secs"] == pytest.approx(3.0)
    assert s.mlperf["checkpoint_write_bw_gibps"] == pytest.approx(2 / 3.0, abs=1e-6)
    assert s.mlperf["checkpoint_size_GB"] == 2.0
