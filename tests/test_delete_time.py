"""Deleting the checkpoint is timed as its own operation, with the statistics of save and load.

In this process for the loop's bookkeeping; in two real rank processes for the per-rank I/O (a
rank whose deletes are slow is named slowest by its own delete time) and for a failed delete,
which must stop both ranks at the same point rather than leave one waiting.
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path
from typing import Any

import pytest

from ckptbench.operator.runtime import metrics
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.status_schema import status_body
from ckptbench.operator.status.aggregate import operation
from ckptbench.operator.status.compute import compute_status
from ckptbench.workload.contract.results.figures import summarize
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from ckptbench.workload.local import report_rows
from ckptbench.workload.local.outputs import csvfile
from ckptbench.workload.rank import loop
from ckptbench.workload.storage import objects as objectio
from ckptbench.workload.storage import session
from tests import workers
from tests.test_status import NOW, jobset, pod
from tests.workers import one_rank, small_config

SLOW = 0.6


def _slow_own_deletes(monkeypatch: pytest.MonkeyPatch, delay: float) -> list[str]:
    real = session.StorageSession.delete_prefix
    calls: list[str] = []

    def delete_prefix(self: Any, url: str, name_prefix: str = "") -> int:
        calls.append(name_prefix or "sweep")
        time.sleep(delay if name_prefix else delay / 2)
        return real(self, url, name_prefix)

    monkeypatch.setattr(session.StorageSession, "delete_prefix", delete_prefix)
    return calls


@pytest.mark.parametrize("procedure", ["ckptbench", "reference"])
def test_each_timed_sample_deletes_once_timed_with_own_io_and_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, procedure: str
) -> None:
    calls = _slow_own_deletes(monkeypatch, 0.1)
    warmups = 1 if procedure == "ckptbench" else 0
    config = one_rank(tmp_path, sample_count=3, warmup_samples=warmups, procedure=procedure)
    result = loop.run(config, log=lambda _: None)
    assert result.error is None and result.verified is True
    # Every checkpoint deleted (warm-up included), each by the rank's own delete then the sweep.
    assert calls == ["__0_", "sweep"] * (3 + warmups)
    assert objectio.list_names(f"{config.run_path}/checkpoints") == []
    delete = result.delete
    assert delete is not None and delete.stats.n == 3  # timed samples only
    assert delete.io_seconds is not None and delete.finish_seconds is not None
    for total, own, sweep in zip(delete.seconds or [], delete.io_seconds, delete.finish_seconds,
                                 strict=True):  # fmt: skip
        assert own - sweep >= 0.1 and sweep >= 0.05  # io is own + finish (rank 0's sweep)
        assert own <= total
    assert delete.stats.mean >= 0.15


def test_kept_checkpoints_have_no_delete_time(tmp_path: Path) -> None:
    result = loop.run(one_rank(tmp_path, keep_checkpoints=True), log=lambda _: None)
    assert result.error is None and result.delete is None
    summary = summarize([result], 1, 1000)
    assert summary.delete is None
    assert not any(r.label.startswith("delete ") for r in report_rows.rows_for([summary]))


def _timing(seconds: list[float], io_: float) -> OpTiming:
    return OpTiming.of(seconds, [io_] * len(seconds))


def test_the_delete_figures_reach_the_csv_table_status_and_metrics() -> None:
    ranks = [
        RankResult(
            rank=r, bytes=40_000, save=_timing([1.0, 2.0], 0.5), load=_timing([1.0, 2.0], 0.5),
            delete=_timing([0.2 + r, 0.4 + r, 0.3 + r], 0.1 + r),
        )
        for r in range(2)
    ]  # fmt: skip
    summary = summarize(ranks, 2, 80_000)  # the spec's below: 40,000 bytes a rank
    delete = summary.delete
    assert delete is not None
    # The collective per sample is the slower rank's: rank 1's [1.2, 1.4, 1.3].
    assert delete.seconds == [1.2, 1.4, 1.3]
    assert delete.mean_seconds == pytest.approx(1.3)
    assert delete.p50_seconds == pytest.approx(1.3) and delete.max_seconds == pytest.approx(1.4)
    assert delete.slowest_rank == 1 and delete.slowest_rank_seconds == pytest.approx(1.1)

    [row] = list(csv.DictReader(io.StringIO(csvfile.to_csv([("cell", summary)]))))
    assert float(row["delete_mean_seconds"]) == delete.mean_seconds
    assert float(row["delete_p90_seconds"]) == delete.p90_seconds
    assert row["delete_slowest_rank"] == "1"

    rows = {r.label: r for r in report_rows.rows_for([summary])}
    assert rows["delete mean (s)"].value(summary) == delete.mean_seconds
    assert rows["delete I/O slowest rank (s)"].value(summary) == pytest.approx(1.1)

    status = status_body(operation(delete, {1: "pod-1"}))
    assert status["meanSeconds"] == delete.mean_seconds
    assert status["slowestRankPod"] == "pod-1"
    spec = CheckpointBenchmarkSpec(
        world_size=2, layer_size=10, padding_size=2, checkpoint_path="gs://bucket/del"
    )
    pods = [pod(r.rank, "Succeeded", r.to_termination_message()) for r in ranks]
    computed = status_body(compute_status(spec, jobset(), pods, None, NOW))
    assert computed["delete"]["meanSeconds"] == delete.mean_seconds
    try:
        metrics.update_benchmark("ns", "del", "file", {"delete": status})
        got = metrics.REGISTRY.get_sample_value(
            "ckptbench_benchmark_duration_seconds",
            {"namespace": "ns", "name": "del", "backend": "file", "operation": "delete",
             "statistic": "mean"},
        )  # fmt: skip
        assert got == delete.mean_seconds
    finally:
        metrics.remove_benchmark("ns", "del")


@pytest.mark.timeout(120)
def test_a_rank_with_slow_deletes_is_named_slowest_by_its_own_delete_time(
    tmp_path: Path,
) -> None:
    config = small_config(str(tmp_path / "ckpt"), warmup_samples=0)
    ranks = workers.run(
        config,
        tmp_path,
        command=[workers.WORKER[0], "-m", "tests.workers", "slow-delete", "1", str(SLOW)],
    )
    assert [w.proc.returncode for w in ranks] == [0, 0], workers.logs(ranks)
    fast, slow = (w.result for w in ranks)
    assert fast.delete is not None and slow.delete is not None
    assert fast.delete.stats.mean >= SLOW and slow.delete.stats.mean >= SLOW  # both waited
    assert slow.delete.io.mean - fast.delete.io.mean == pytest.approx(SLOW, abs=0.3)
    summary = summarize([fast, slow], config.world_size, config.total_bytes)
    assert summary.delete is not None and summary.delete.slowest_rank == 1
    assert objectio.list_names(f"{config.run_path}/checkpoints") == []


@pytest.mark.timeout(120)
def test_a_failed_delete_on_one_rank_stops_both(tmp_path: Path) -> None:
    config = small_config(str(tmp_path / "ckpt"), warmup_samples=0)
    ranks = workers.run(
        config,
        tmp_path,
        command=[workers.WORKER[0], "-m", "tests.workers", "fail-delete", "1"],
    )
    first, failing = (w.result for w in ranks)
    assert failing.error is not None and "injected: cannot delete" in failing.error
    assert first.error is not None and "rank 1 failed during delete" in first.error
    assert [w.proc.returncode for w in ranks] != [0, 0]


def test_a_long_delete_series_leaves_the_termination_message_within_its_limit() -> None:
    many = [0.123456 + i * 1e-6 for i in range(300)]
    result = RankResult(rank=3, bytes=1, delete=OpTiming.of(many, many))
    text = result.to_termination_message()
    assert len(text.encode()) <= 4096
    back = RankResult.from_termination_message(text)
    assert back.delete is not None and back.delete.stats == result.delete.stats  # type: ignore[union-attr]
