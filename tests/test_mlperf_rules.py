"""MLPerf Storage v3.0's rules: CLOSED or OPEN from the settings, and the 3 x RAM rule."""

from __future__ import annotations

import pytest

from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.status_schema import status_body
from ckptbench.operator.status.compute import compute_status
from ckptbench.workload.contract.choices import CacheMode, Procedure
from ckptbench.workload.contract.results import figures, mlperf_figures, mlperf_rules
from ckptbench.workload.contract.results.rank import OpTiming, RankResources, RankResult
from ckptbench.workload.contract.settings import BenchmarkSettings
from ckptbench.workload.local import report, report_rows
from ckptbench.workload.local.outputs import csvfile
from tests.test_status import NOW, jobset, pod

GIB = 2**30


def _settings(**changes: object) -> dict[str, object]:
    values: dict[str, object] = {
        "model": "llama3-8b", "world_size": 8, "dtype": "mlperf", "procedure": "mlperf",
        "checkpoint_path": "gs://bucket/ckpt",
    }  # fmt: skip
    values.update(changes)
    return BenchmarkSettings.model_validate(values).record()


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"checkpoint_path": "/mnt/other/folder", "backend": "file"},  # only the folder moved
        {"backend": "gcsfs", "project": "p"},
        {"model": "llama3-405b", "world_size": 512},
        {"model": "mlperf-llama3-1t", "world_size": 8},  # the 8-process subset
        {"verify": False, "seed": 7, "keep_checkpoints": True},  # nothing timed changes
    ],
)
def test_mlperfs_own_settings_are_closed(changes: dict[str, object]) -> None:
    assert mlperf_rules.category(_settings(**changes)) == ("CLOSED", [])


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"threads": 16}, "threads is 16, not its default 8"),
        ({"dtype": "fp32"}, "dtype is fp32, not mlperf"),
        ({"layers": 1}, "layers is 1, not unset"),
        ({"world_size": 4}, "world_size is 4, not 8"),
        ({"model": "mlperf-llama3-70b", "world_size": 32},
         "world_size is 32, not 64 (or the 8-process subset)"),
        ({"model": "llama3-70b"}, "model is llama3-70b, not one of MLPerf Storage v3.0's"),
        ({"async_save": True}, "save_mode is thread, not its default sync"),
        ({"garbage_collection": "automatic"}, "garbage_collection is automatic"),
    ],
)  # fmt: skip
def test_a_changed_setting_is_open_and_named(changes: dict[str, object], reason: str) -> None:
    found = mlperf_rules.category(_settings(**changes))
    assert found is not None and found.label == "OPEN"
    assert any(r.startswith(reason) for r in found.reasons), found.reasons


def test_other_procedures_have_no_category() -> None:
    assert mlperf_rules.category(_settings(procedure="ckptbench")) is None


def _rank(rank: int, host: str, shard: int, memory: int, cache: CacheMode | None) -> RankResult:
    t = OpTiming.of([1.0] * 10, [0.5] * 10)
    return RankResult(
        rank=rank, host=host, bytes=shard, save=t, load=t, cache=cache,
        procedure=Procedure.MLPERF,
        resources=RankResources(cpu_user_seconds=1, cpu_system_seconds=1, peak_rss_bytes=1,
                                sent_bytes=1, received_bytes=1, node_memory_bytes=memory),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("shard_gib", "cache", "verdict"),
    [
        (4, CacheMode.KEPT, "met by size"),  # 2 ranks x 4 GiB x 10 saves = 80 > 3 x 20
        (2, CacheMode.DROPPED, "met by eviction"),  # 40 < 60, evicted before each load
        (2, CacheMode.KEPT, "not met"),
        (3, CacheMode.KEPT, "not met"),  # exactly 3 x RAM is not above it
    ],
)
def test_the_3x_ram_rule_per_node(shard_gib: float, cache: CacheMode, verdict: str) -> None:
    shard = int(shard_gib * GIB)
    ranks = [_rank(r, "node-a", shard, 20 * GIB, cache) for r in range(2)]
    summary = figures.summarize(ranks, 2, 2 * shard)
    assert summary.ram_rule == verdict
    assert summary.ram_rule_written_bytes == 2 * shard * 10
    assert summary.ram_rule_memory_bytes == 20 * GIB


def test_the_node_nearest_to_failing_decides() -> None:
    ranks = [_rank(0, "big", GIB, 64 * GIB, CacheMode.KEPT),
             _rank(1, "small", GIB, GIB, CacheMode.KEPT)]  # fmt: skip
    assert figures.summarize(ranks, 2, 2 * GIB).ram_rule == "not met"  # 10 GiB < 3 x 64
    no_file = [_rank(0, "n", GIB, GIB, None)]
    assert figures.summarize(no_file, 1, GIB).ram_rule is None  # not the file backend


def test_category_and_rule_reach_the_table_csv_and_status() -> None:
    import csv
    import io

    # 40,000 bytes a rank: what the spec below gives each (a result must match its spec).
    ranks = [_rank(r, "n", 40_000, GIB, CacheMode.DROPPED) for r in range(2)]
    summary = figures.summarize(ranks, 2, 80_000)
    summary = summary.model_copy(update=figures.category_figures(_settings(threads=16)))
    labels = {r.label: r.value(summary) for r in report_rows.rows_for([summary])}
    assert labels["MLPerf category"] == "OPEN" and labels["3 x RAM rule"] == "met by eviction"
    assert "MLPerf OPEN: threads is 16" in report.format_context([("c", summary)])
    [row] = list(csv.DictReader(io.StringIO(csvfile.to_csv([("c", summary)]))))
    assert row["mlperf_category"] == "OPEN"
    assert row["mlperf_open_reasons"].startswith("threads is 16")
    assert row["ram_rule"] == "met by eviction"
    for column in ("Write B/W (GiB/s)", "Write Duration (secs)", "Read B/W (GiB/s)",
                   "Read Duration (secs)"):  # fmt: skip
        assert summary.mlperf is not None
        key = mlperf_figures.MLPERF_V3_COLUMNS[column]
        assert float(row[column]) == summary.mlperf[key], column

    spec = CheckpointBenchmarkSpec(
        world_size=2, layer_size=10, padding_size=2, checkpoint_path="gs://bucket/x",
        procedure=Procedure.MLPERF, sample_count=10, warmup_samples=0,
    )  # fmt: skip
    pods = [pod(r.rank, "Succeeded", r.to_termination_message()) for r in ranks]
    status = status_body(compute_status(spec, jobset(), pods, None, NOW))
    assert status["mlperfCategory"] == "OPEN"
    assert status["mlperfOpenReasons"][0].startswith("model is none")
    assert status["ramRule"] == "met by eviction"
