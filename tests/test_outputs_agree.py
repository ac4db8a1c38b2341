"""One real local run, every output of it: a figure that appears in several reads the same in each.

The table (stdout), the JSON and CSV files, the status the operator computes from the same ranks'
results (their termination messages, in pods) and the operator's metrics for that status. Then a
real resharding load, whose per-rank load figures must be what each loading rank read over its I/O.
"""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ckptbench.operator.runtime import metrics
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.status_schema import status_body
from ckptbench.operator.status import compute as st
from ckptbench.workload.contract.checkpoint import models
from ckptbench.workload.contract.choices import Procedure
from ckptbench.workload.contract.results.rank import RankResult
from tests.test_status import NOW, jobset, pod

ROOT = Path(__file__).resolve().parent.parent
GIB, MIB = 2**30, 2**20
ENV = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}


def _run(tmp_path: Path, *argv: str) -> tuple[str, dict[str, Any], dict[str, str], Path]:
    out, table = tmp_path / "run.json", tmp_path / "run.csv"
    storage = tmp_path / "ckpt"
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "run", "--storage", str(storage), *argv,
         "--json", str(out), "--csv", str(table)],
        cwd=ROOT, capture_output=True, text=True, timeout=280, env=ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [run] = json.loads(out.read_text())["runs"]
    [row] = list(csv.DictReader(table.open()))
    return proc.stdout, run, row, storage / run["extra"]["settings"]["run_id"] / "results"


def _rank_results(results: Path, world_size: int) -> list[RankResult]:
    return [
        RankResult.model_validate_json((results / f"rank-{r:05d}.json").read_text())
        for r in range(world_size)
    ]


def _table(stdout: str) -> dict[str, str]:
    """Row label -> the run's cell, from the table printed on stdout."""
    rows: dict[str, str] = {}
    for line in stdout.split("\n\n")[0].splitlines()[1:]:
        label, _, value = line.rpartition("  ")
        rows[label.strip()] = value.strip()
    return rows


@pytest.fixture
def clean_metrics() -> Iterator[None]:
    yield
    metrics.remove_benchmark("ns", "agree")


# (table label after the operation's name, JSON field, status field, metric (gauge, label))
_SECONDS = [
    ("mean (s)", "mean_seconds", "meanSeconds", (metrics.DURATION, "mean")),
    ("p50 (s)", "p50_seconds", "p50Seconds", (metrics.DURATION, "p50")),
    ("p90 (s)", "p90_seconds", "p90Seconds", (metrics.DURATION, "p90")),
    ("max (s)", "max_seconds", "maxSeconds", (metrics.DURATION, "max")),
    ("stdev (s)", "stdev_seconds", "stdevSeconds", None),
    ("planning (s)", "planning_mean_seconds", "planningSeconds",
     (metrics.PART_SECONDS, "planning")),
    ("I/O slowest rank (s)", "slowest_rank_seconds", "slowestRankSeconds",
     (metrics.PART_SECONDS, "io_slowest_rank")),
    ("I/O fastest rank (s)", "fastest_rank_seconds", "fastestRankSeconds",
     (metrics.PART_SECONDS, "io_fastest_rank")),
    ("collective overhead (s)", "collective_overhead_seconds", "collectiveOverheadSeconds",
     (metrics.PART_SECONDS, "collective_overhead")),
]  # fmt: skip
_RATES = [
    ("throughput", "throughput_bytes_per_second", "throughput_gib_per_second",
     "throughputBytesPerSecond", (metrics.THROUGHPUT, "aggregate")),
    ("min per-rank", "min_rank_throughput_bytes_per_second", "min_rank_gib_per_second",
     "minRankThroughputBytesPerSecond", (metrics.THROUGHPUT, "min_rank")),
]  # fmt: skip


# Each mean's 95% interval: (table label after the operation's name, or None for a rate whose
# label carries the unit; JSON field; CSV column; status field; whether it is a rate).
_INTERVALS = [
    ("mean 95% CI (s)", "mean_seconds_ci", "mean_seconds", "meanSecondsCi", False),
    ("throughput 95% CI", "throughput_bytes_per_second_ci", "throughput_gib_per_second",
     "throughputBytesPerSecondCi", True),
]  # fmt: skip
_MLPERF_INTERVALS = [
    ("span 95% CI (s)", "span_mean_seconds_ci", "span_mean_seconds", "spanMeanSecondsCi", False),
    ("span throughput 95% CI", "span_throughput_bytes_per_second_ci",
     "span_throughput_gib_per_second", "spanThroughputBytesPerSecondCi", True),
]  # fmt: skip


def _interval_agrees(
    table: dict[str, str], row: dict[str, str], status: dict[str, Any], run: dict[str, Any],
    op: str, spec: tuple[str, str, str, str, bool],
) -> None:  # fmt: skip
    """The same interval in the table, the JSON, the CSV and the status."""
    label, field, column, key, rate = spec
    ci = run[op][field]
    assert ci is not None and ci["low"] <= (ci["high"] or float("inf")), (op, field)
    high = ci.get("high")
    assert status[op][key] == ({"low": ci["low"]} if high is None else ci), (op, key)
    scale = GIB if rate else 1
    assert float(row[f"{op}_{column}_ci_low"]) == ci["low"] / scale, (op, column)
    assert float(row[f"{op}_{column}_ci_high"]) == (float("inf") if high is None else high / scale)
    if rate:
        [(shown_label, shown)] = [
            (k, v) for k, v in table.items() if k.startswith(f"{op} {label} (")
        ]
        unit = GIB if "(GiB/s)" in shown_label else MIB
    else:
        shown, unit = table[f"{op} {label}"], 1
    upper = "inf" if high is None else f"{high / unit:.3f}"
    assert shown == f"[{ci['low'] / unit:.3f}, {upper}]", (op, label, shown)


def _metric(gauge: Any, op: str, label: str) -> float | None:
    name = gauge._name
    labels = {"namespace": "ns", "name": "agree", "backend": "file", "operation": op}
    labels["statistic" if gauge is metrics.DURATION else "kind" if gauge is metrics.THROUGHPUT
           else "part"] = label  # fmt: skip
    return metrics.REGISTRY.get_sample_value(name, labels)


def _rate_cell(table: dict[str, str], op: str, name: str, value: float) -> None:
    [(label, shown)] = [(k, v) for k, v in table.items() if k.startswith(f"{op} {name} (")]
    scale = GIB if "(GiB/s)" in label else MIB
    assert shown == f"{value / scale:.3f}", (label, shown, value)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("procedure", ["ckptbench", "mlperf"])
def test_every_output_of_one_run_reports_each_figure_the_same(
    tmp_path: Path, procedure: str, clean_metrics: None
) -> None:
    samples = "10" if procedure == "mlperf" else "2"
    stdout, run, row, results = _run(
        tmp_path, "--layer-size", "1000", "--padding-size", "4", "--world-size", "2",
        "--samples", samples, "--warmup", "0", "--procedure", procedure,
    )  # fmt: skip
    table = _table(stdout)
    ranks = _rank_results(results, 2)
    spec = CheckpointBenchmarkSpec(
        world_size=2, layer_size=1000, padding_size=4, checkpoint_path="gs://bucket/agree",
        procedure=Procedure(procedure), sample_count=int(samples), warmup_samples=0,
    )  # fmt: skip
    pods = [pod(r.rank, "Succeeded", r.to_termination_message()) for r in ranks]
    status = status_body(st.compute_status(spec, jobset(), pods, None, NOW))
    metrics.update_benchmark("ns", "agree", "file", status)

    assert status["phase"] == "Succeeded"
    assert run["total_bytes"] == status["checkpointBytes"] == int(row["total_bytes"])
    assert metrics.REGISTRY.get_sample_value(
        "ckptbench_benchmark_checkpoint_bytes",
        {"namespace": "ns", "name": "agree", "backend": "file"},
    ) == float(run["total_bytes"])
    assert table["total size (MiB)"] == f"{run['total_bytes'] / MIB:.2f}"
    for op in ("save", "load"):
        mine, theirs = run[op], status[op]
        for label, field, key, metric in _SECONDS:
            value = mine[field]
            assert table[f"{op} {label}"] == f"{value:.3f}", (op, label)
            assert float(row[f"{op}_{field}"]) == value, (op, field)
            assert theirs[key] == value, (op, key)
            if metric is not None:
                assert _metric(metric[0], op, metric[1]) == value, (op, metric)
        for name, field, column, key, metric in _RATES:
            value = mine[field]
            _rate_cell(table, op, name, value)
            assert float(row[f"{op}_{column}"]) == value / GIB, (op, column)
            assert theirs[key] == pytest.approx(value, abs=1e-3), (op, key)
            assert _metric(metric[0], op, metric[1]) == theirs[key]
        for interval in _INTERVALS + (_MLPERF_INTERVALS if procedure == "mlperf" else []):
            _interval_agrees(table, row, status, run, op, interval)
        for field in ("samples", "slowest_rank"):
            assert int(row[f"{op}_{field}"]) == mine[field]
        assert table[f"{op} samples"] == str(mine["samples"]) == str(theirs["samples"])
        assert table[f"{op} slowest rank"] == str(mine["slowest_rank"])
        assert theirs["slowestRank"] == mine["slowest_rank"]
        assert theirs["minSeconds"] == mine["min_seconds"] == float(row[f"{op}_min_seconds"])
        assert theirs["rankIoSeconds"] == mine["rank_io_seconds"]
        for field in ("span_mean_seconds", "median_rank_throughput_bytes_per_second"):
            assert mine[field] is not None and mine[field] > 0
        assert float(row[f"{op}_span_mean_seconds"]) == mine["span_mean_seconds"]
        assert float(row[f"{op}_median_rank_gib_per_second"]) == (
            mine["median_rank_throughput_bytes_per_second"] / GIB
        )
        assert float(row[f"{op}_span_throughput_gib_per_second"]) == (
            mine["span_throughput_bytes_per_second"] / GIB
        )
        if procedure == "mlperf":
            assert table[f"{op} span (s)"] == f"{mine['span_mean_seconds']:.3f}"
            _rate_cell(table, op, "span throughput", mine["span_throughput_bytes_per_second"])
            _rate_cell(
                table, op, "median per-rank", mine["median_rank_throughput_bytes_per_second"]
            )
    if procedure == "mlperf":
        assert run["mlperf"] and status["mlperf"] == run["mlperf"]
        for key, value in run["mlperf"].items():
            assert float(row[key]) == value, key
        # MLPerf's bandwidth is the span's, which the table shows as the span throughput.
        assert run["mlperf"]["checkpoint_read_bw_gibps"] == round(
            run["load"]["span_throughput_bytes_per_second"] / GIB, 6
        )
    else:
        assert run["mlperf"] is None and "mlperf" not in status
        assert row["checkpoint_read_bw_gibps"] == ""
    # The stored checkpoint, as rank 0 listed it, in the table, the JSON and the CSV.
    stored = run["extra"]["checkpoint"]
    assert stored == ranks[0].checkpoint
    assert stored["objects"] == 3  # two data files and .metadata
    assert table["stored size (MiB)"] == f"{stored['stored_bytes'] / MIB:.2f}"
    assert table["stored objects"] == str(stored["objects"]) == row["stored_objects"]
    assert table[".metadata (MiB)"] == f"{stored['metadata_bytes'] / MIB:.3f}"
    assert int(row["stored_bytes"]) == stored["stored_bytes"]
    assert int(row["metadata_bytes"]) == stored["metadata_bytes"]
    ratio = float(row["stored_per_payload"])
    assert table["stored / payload"] == f"{ratio:.4f}"
    assert ratio == round(stored["stored_bytes"] / run["total_bytes"], 6)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_resharding_loads_per_rank_figures_are_what_each_rank_read_over_its_io(
    tmp_path: Path,
) -> None:
    stdout, run, row, results = _run(
        tmp_path, "--model", "llama3-debug", "--world-size", "3", "--load-world-size", "2",
        "--samples", "2", "--warmup", "0",
    )  # fmt: skip
    ranks = _rank_results(results, 3)
    spec = models.ModelSpec("llama3-debug")  # adamw, fp32: the defaults the run used
    tensors = models.state_tensors(spec)
    for r in ranks:
        assert r.bytes == models.rank_bytes(tensors, 3, r.rank)
        want = models.rank_bytes(tensors, 2, r.rank) if r.rank < 2 else 0
        assert r.load_bytes == want, r.rank
    loading = [r for r in ranks if r.rank < 2]
    rates = [(r.load_bytes or 0) / r.load.io.mean for r in loading if r.load]
    load = run["load"]
    assert load["ranks_left_out"] == 1 and int(row["load_ranks_left_out"]) == 1
    assert load["min_rank_throughput_bytes_per_second"] == pytest.approx(min(rates), rel=1e-9)
    assert load["median_rank_throughput_bytes_per_second"] == pytest.approx(
        statistics.median(rates), rel=1e-9
    )
    io = {r.rank: r.load.io.mean for r in loading if r.load}
    assert load["fastest_rank_seconds"] == min(io.values())
    assert load["slowest_rank_seconds"] == max(io.values())
    assert load["slowest_rank"] in io
    assert run["load_shard_bytes"] == max(r.load_bytes or 0 for r in ranks)
    assert run["load_shard_bytes"] > run["shard_bytes"]
    table = _table(stdout)
    assert table["load ranks left out"] == "1"
    assert table["load I/O fastest rank (s)"] == f"{min(io.values()):.3f}"
    assert float(table["load I/O fastest rank (s)"]) > 0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_run_past_the_termination_messages_room_for_samples_reports_what_its_summary_does(
    tmp_path: Path,
) -> None:
    """Each rank's termination message (4 KiB) has dropped its sample lists by 24 samples of
    the real worker (tests/test_run_cli.py has 120 of a stand-in), yet the table, the JSON and
    the CSV read every sample, as the summary.json the ranks wrote does."""
    stdout, run, row, results = _run(
        tmp_path, "--layer-size", "10", "--padding-size", "2", "--world-size", "2",
        "--samples", "24", "--warmup", "0",
    )  # fmt: skip
    ranks = _rank_results(results, 2)
    for r in ranks:  # what a pod's termination message carries: no samples
        assert r.save is not None and r.save.seconds is not None
        compact = RankResult.from_termination_message(r.to_termination_message())
        assert compact.save is not None and compact.save.seconds is None
    summary = json.loads((results / "summary.json").read_text())
    table = _table(stdout)
    for op in ("save", "load", "delete"):
        assert run[op]["samples"] == 24
        assert run[op] == summary[op], op
    for op in ("save", "load"):
        for label, field, _, _ in _SECONDS:
            assert table[f"{op} {label}"] == f"{summary[op][field]:.3f}", (op, label)
            assert float(row[f"{op}_{field}"]) == summary[op][field], (op, field)
