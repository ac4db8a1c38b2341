"""Per-rank resources: CPU seconds, peak RSS and bytes to and from storage, in every output."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pytest

from ckptbench.operator.runtime import metrics
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.status_schema import status_body
from ckptbench.operator.status.compute import compute_status
from ckptbench.workload.contract.results import figures
from ckptbench.workload.contract.results.rank import OpTiming, RankResources, RankResult
from ckptbench.workload.local import report_rows
from ckptbench.workload.local.outputs import csvfile
from ckptbench.workload.rank import loop, state
from ckptbench.workload.rank.process import memory, resources
from ckptbench.workload.storage import objects as objectio
from tests.test_status import NOW, jobset, pod
from tests.workers import one_rank

BURN = 0.4


def test_a_rank_reports_its_cpu_its_peak_and_exactly_the_bytes_it_stored_and_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_verify = state.verify

    def burning_verify(*args: object, **kwargs: object) -> None:
        # CPU in user mode, inside the loop: process_time also counts the kernel's time, which
        # on a busy virtual machine took a third of the burn and left the user seconds short.
        until = os.times().user + BURN
        while os.times().user < until:
            pass
        real_verify(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(state, "verify", burning_verify)
    config = one_rank(tmp_path, sample_count=2, warmup_samples=1, keep_checkpoints=True)
    result = loop.run(config, log=lambda _: None)
    assert result.error is None and result.verified is True
    used = result.resources
    assert used is not None and result.load is not None
    assert used.cpu_user_seconds >= 3 * BURN  # three loads verified, warm-up included
    assert used.peak_rss_bytes is not None and used.peak_rss_bytes > result.bytes
    # The saves wrote each checkpoint once (data files and .metadata), and nothing else.
    stored = sum(sum(objectio.list_sizes(config.checkpoint_id(i)).values()) for i in range(3))
    assert used.sent_bytes == stored
    # Every load read at least what its plan needed; the timed loads' reads are part of it.
    assert used.received_bytes >= (result.load.read_bytes or 0) > 0
    assert used.received_bytes < 1.1 * stored


def _ranks() -> list[RankResult]:
    t = OpTiming.of([1.0], [0.5])
    slow = OpTiming.of([1.0], [0.9])
    return [
        RankResult(
            rank=r, bytes=40_000, save=slow if r == 1 else t, load=t,
            resources=RankResources(
                cpu_user_seconds=1.0 + r, cpu_system_seconds=0.5 - 0.1 * r,
                peak_rss_bytes=1000 * (3 - r), sent_bytes=100 + r, received_bytes=200 + 2 * r,
            ),
        )
        for r in range(3)
    ]  # fmt: skip


def test_the_summary_has_maxima_totals_and_the_slowest_ranks_own() -> None:
    summary = figures.summarize(_ranks(), 3, 120_000)
    r = summary.resources
    assert r is not None and r.ranks == 3
    assert (r.max_cpu_user_seconds, r.max_cpu_system_seconds) == (3.0, 0.5)
    assert r.max_peak_rss_bytes == 3000
    assert (r.sent_bytes, r.received_bytes) == (303, 606)
    assert (r.max_sent_bytes, r.max_received_bytes) == (102, 204)
    assert r.slowest_rank == 1
    assert r.slowest_rank_resources is not None
    assert r.slowest_rank_resources.cpu_user_seconds == 2.0


def test_the_resources_reach_the_csv_table_status_and_metrics() -> None:
    ranks = _ranks()
    summary = figures.summarize(ranks, 3, 120_000)  # the spec's below: 40,000 a rank
    [row] = list(csv.DictReader(io.StringIO(csvfile.to_csv([("c", summary)]))))
    assert float(row["rank_max_cpu_user_seconds"]) == 3.0
    assert int(row["rank_sent_bytes"]) == 303
    assert float(row["slowest_rank_cpu_user_seconds"]) == 2.0
    rows = {r.label: r for r in report_rows.rows_for([summary])}
    assert rows["rank CPU user max (s)"].value(summary) == 3.0
    # One peak-RSS figure: one row, one CSV column, one status field, one series.
    peak_rows = [label for label in rows if "peak RSS" in label]
    assert peak_rows == ["peak RSS, rank (MiB)"]
    assert rows["peak RSS, rank (MiB)"].value(summary) == 3000
    assert int(row["rank_max_peak_rss_bytes"]) == 3000
    assert int(row["slowest_rank_peak_rss_bytes"]) == 2000
    assert [k for k in row if "peak_rss" in k] == [
        "checkpointer_peak_rss_bytes",
        "rank_max_peak_rss_bytes",
        "slowest_rank_peak_rss_bytes",
    ]

    spec = CheckpointBenchmarkSpec(
        world_size=3, layer_size=10, padding_size=3, checkpoint_path="gs://bucket/res"
    )
    pods = [pod(r.rank, "Succeeded", r.to_termination_message()) for r in ranks]
    status = status_body(compute_status(spec, jobset(), pods, None, NOW))
    assert status["resources"]["maxCpuUserSeconds"] == 3.0
    assert status["resources"]["slowestRank"] == status["slowestRank"] == 1
    assert status["resources"]["slowestRankResources"]["cpuUserSeconds"] == 2.0
    assert status["resources"]["maxPeakRssBytes"] == 3000
    assert "peakRssBytes" not in status
    try:
        metrics.update_benchmark("ns", "res", "gcs", status)
        labels = {"namespace": "ns", "name": "res", "backend": "gcs"}
        get = metrics.REGISTRY.get_sample_value
        cpu = "ckptbench_benchmark_rank_cpu_seconds"
        network = "ckptbench_benchmark_rank_network_bytes"
        assert get(cpu, {**labels, "mode": "user", "statistic": "max"}) == 3.0
        assert get(network, {**labels, "direction": "received", "statistic": "total"}) == 606.0
        assert get(cpu, {**labels, "mode": "user", "statistic": "slowest_rank"}) == 2.0
        peak = "ckptbench_benchmark_peak_rss_bytes"
        assert get(peak, {**labels, "process": "rank", "statistic": "max"}) == 3000
        assert get(peak, {**labels, "process": "rank", "statistic": "slowest_rank"}) == 2000
    finally:
        metrics.remove_benchmark("ns", "res")


def test_the_peak_is_the_processs_own_high_water_mark_read_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rank's one peak-RSS figure is VmHWM (memory.peak_rss_bytes), not ru_maxrss: after a
    fork and exec, ru_maxrss starts from the parent's resident set (docs/measurement.md)."""
    assert memory.peak_rss_bytes() == _vm_hwm()
    monkeypatch.setattr(memory, "peak_rss_bytes", lambda pid="self": 123_456_789)
    assert resources.Meter().read().peak_rss_bytes == 123_456_789


def _vm_hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")
