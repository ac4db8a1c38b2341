"""Each published figure against its definition (docs/measurement.md), on realistic ranks.

Three ranks with distinct save and load times, rank 0 not the slowest, distinct per-rank I/O, and
samples whose mean is not their median, so that a figure computed from the wrong rank, the wrong
operation, the wrong statistic or the wrong unit cannot pass. Expected values are computed here
with Python's ``statistics``, not with the code under test.
"""

from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path

import pytest

from ckptbench.workload.contract.choices import Procedure
from ckptbench.workload.contract.results import figures, mlperf_figures
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from ckptbench.workload.contract.results.summaries import OpSummary, RunSummary
from ckptbench.workload.local.outputs import csvfile

GIB = 2**30
SHARD = 3 * GIB // 2  # 1.5 GiB a rank
TOTAL = 3 * SHARD
# Per rank: barrier-to-barrier seconds per sample (save, load), own I/O seconds, start offsets.
SAVE = {0: [2.0, 2.2, 4.1], 1: [2.1, 2.4, 4.3], 2: [2.05, 2.3, 4.2]}
LOAD = {0: [1.1, 1.0, 1.9], 1: [1.2, 1.05, 2.0], 2: [1.15, 1.1, 1.95]}
SAVE_IO = {0: 1.2, 1: 1.9, 2: 1.5}  # rank 1 the slowest saver
LOAD_IO = {0: 0.7, 1: 0.5, 2: 0.95}  # rank 2 the slowest loader
START_LAG = {0: 0.0, 1: 0.3, 2: 0.1}  # ranks start each sample at slightly different times
SAVE_AT = [1000.0, 1010.0, 1020.0]
LOAD_AT = [2000.0, 2010.0, 2020.0]


def _timing(seconds: list[float], io_mean: float, at: list[float], lag: float) -> OpTiming:
    starts = [a + lag for a in at]
    ends = [s + x for s, x in zip(starts, seconds, strict=True)]
    # Own I/O varies a little by sample around the rank's mean.
    ios = [io_mean - 0.1, io_mean, io_mean + 0.1]
    return OpTiming.of(seconds, ios, [0.05] * 3, started_at=starts, ended_at=ends)


def _ranks(load_bytes: dict[int, int] | None = None) -> list[RankResult]:
    return [
        RankResult(
            rank=r,
            bytes=SHARD,
            load_bytes=None if load_bytes is None else load_bytes[r],
            save=_timing(SAVE[r], SAVE_IO[r], SAVE_AT, START_LAG[r]),
            load=_timing(LOAD[r], LOAD_IO[r], LOAD_AT, START_LAG[r]),
            verified=True,
            procedure=Procedure.MLPERF,
        )
        for r in range(3)
    ]


def _summary(load_bytes: dict[int, int] | None = None) -> RunSummary:
    return figures.summarize(_ranks(load_bytes), world_size=3, total_bytes=TOTAL)


def _spans(seconds: dict[int, list[float]], at: list[float]) -> list[float]:
    return [
        max(at[i] + START_LAG[r] + seconds[r][i] for r in range(3))
        - min(at[i] + START_LAG[r] for r in range(3))
        for i in range(3)
    ]


def test_mlperf_write_figures_are_the_saves_and_read_figures_the_loads() -> None:
    s = _summary()
    assert s.mlperf is not None
    for op, column, seconds, at in (
        ("save", "write", SAVE, SAVE_AT),
        ("load", "read", LOAD, LOAD_AT),
    ):
        spans = _spans(seconds, at)
        mean_span = statistics.fmean(spans)
        assert s.mlperf[f"checkpoint_{column}_duration_secs"] == pytest.approx(mean_span, abs=1e-6)
        assert s.mlperf[f"{op}_checkpoint_duration_mean_seconds"] == pytest.approx(
            mean_span, abs=1e-6
        )
        assert s.mlperf[f"checkpoint_{column}_bw_gibps"] == pytest.approx(
            TOTAL / GIB / mean_span, abs=1e-6
        )


def test_mlperf_gb_per_second_is_gib_per_second_of_each_span_as_dlio_summarises_them() -> None:
    s = _summary()
    assert s.mlperf is not None
    for op, seconds, at in (("save", SAVE, SAVE_AT), ("load", LOAD, LOAD_AT)):
        # MLPerf's "GB" is 2^30 bytes; DLIO takes numpy's mean and (population) std.
        rates = [TOTAL / 2**30 / x for x in _spans(seconds, at)]
        assert s.mlperf[f"{op}_checkpoint_io_mean_GB_per_second"] == pytest.approx(
            statistics.fmean(rates), abs=1e-6
        )
        assert s.mlperf[f"{op}_checkpoint_io_stdev_GB_per_second"] == pytest.approx(
            statistics.pstdev(rates), abs=1e-6
        )
    assert s.mlperf["checkpoint_size_GB"] == pytest.approx(TOTAL / 2**30)


def test_the_references_figures_are_rank_0s_own_mean_and_stdev() -> None:
    s = _summary()
    assert s.save is not None and s.load is not None
    for op, seconds in ((s.save, SAVE), (s.load, LOAD)):
        assert op.rank0_mean_seconds == pytest.approx(statistics.fmean(seconds[0]), abs=1e-6)
        assert op.rank0_stdev_seconds == pytest.approx(statistics.stdev(seconds[0]), abs=1e-6)
        # Not the collective's: rank 0 is not the slowest rank in any sample.
        assert op.rank0_mean_seconds is not None and op.rank0_mean_seconds < op.mean_seconds


def test_throughput_is_total_bytes_over_the_mean_collective_duration() -> None:
    s = _summary()
    assert s.save is not None and s.load is not None
    for op, seconds in ((s.save, SAVE), (s.load, LOAD)):
        collective = [max(seconds[r][i] for r in range(3)) for i in range(3)]
        assert op.seconds == pytest.approx(collective)
        assert op.mean_seconds == pytest.approx(statistics.fmean(collective), abs=1e-6)
        assert statistics.median(collective) != pytest.approx(statistics.fmean(collective))
        assert op.throughput_bytes_per_second == pytest.approx(
            TOTAL / statistics.fmean(collective), rel=1e-6
        )
        assert op.stdev_seconds == pytest.approx(statistics.stdev(collective), abs=1e-6)


def test_per_rank_figures_are_each_ranks_bytes_over_its_mean_io() -> None:
    s = _summary()
    assert s.save is not None and s.load is not None
    for op, io_means, slowest in ((s.save, SAVE_IO, 1), (s.load, LOAD_IO, 2)):
        rates = [SHARD / io_means[r] for r in range(3)]
        assert op.min_rank_throughput_bytes_per_second == pytest.approx(min(rates))
        assert op.median_rank_throughput_bytes_per_second == pytest.approx(statistics.median(rates))
        assert op.slowest_rank == slowest
        assert op.slowest_rank_seconds == pytest.approx(max(io_means.values()))
        assert op.fastest_rank_seconds == pytest.approx(min(io_means.values()))
        assert op.ranks_left_out == 0


def test_a_resharding_load_divides_what_each_rank_loaded_and_leaves_out_who_loaded_nothing() -> (
    None
):
    # 3 ranks saved 1.5 GiB each; 2 ranks loaded it all back (2.25 GiB each), rank 2 nothing.
    loaded = {0: TOTAL // 2, 1: TOTAL // 2, 2: 0}
    s = _summary(loaded)
    assert s.load is not None and s.save is not None
    rates = [loaded[r] / LOAD_IO[r] for r in (0, 1)]
    assert s.load.min_rank_throughput_bytes_per_second == pytest.approx(min(rates))
    assert s.load.median_rank_throughput_bytes_per_second == pytest.approx(statistics.median(rates))
    assert s.load.ranks_left_out == 1
    assert s.load.slowest_rank == 0  # rank 2 took longest but read nothing
    assert s.load.fastest_rank_seconds == pytest.approx(LOAD_IO[1])
    assert s.load_shard_bytes == TOTAL // 2 and s.shard_bytes == SHARD
    # The save is every rank's, unchanged.
    assert s.save.ranks_left_out == 0
    assert s.save.min_rank_throughput_bytes_per_second == pytest.approx(SHARD / SAVE_IO[1])


def test_the_csvs_mlperf_columns_are_the_summarys() -> None:
    s = _summary()
    assert s.mlperf is not None and s.load is not None
    # The spans differ from the collective durations, so a figure of its own would differ.
    assert s.load.span_mean_seconds != pytest.approx(s.load.mean_seconds, abs=1e-3)
    [row] = list(csv.DictReader(io.StringIO(csvfile.to_csv([("gcs", s)]))))
    assert set(mlperf_figures.mlperf_keys()) <= set(row)
    for key, value in s.mlperf.items():
        assert float(row[key]) == value, key


def test_every_published_figure_is_defined_in_measurement_md() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "measurement.md").read_text()
    definitions = doc[doc.index("## Definitions") :]
    for name in OpSummary.model_fields:
        assert f"`{name}`" in definitions, name
    for name in ("total_bytes", "shard_bytes", "load_shard_bytes", "stored_bytes", "objects"):
        assert f"`{name}`" in definitions, name
    for key in mlperf_figures.mlperf_keys():
        shown = key.replace("load_", "save_").replace("_read_", "_write_")
        assert f"`{shown}`" in definitions, key
