"""The readable table: numbers formatted in honest units, missing operations, failures, ratios."""

from __future__ import annotations

import pytest

from ckptbench.workload.contract.results.figures import summarize
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from ckptbench.workload.contract.results.summaries import RunSummary
from ckptbench.workload.local import report

GIB = 1024**3


def _rank(
    rank: int,
    save: list[float] | None,
    load: list[float] | None,
    *,
    nbytes: int = GIB,
    verified: bool | None = True,
    error: str | None = None,
    blocked: list[float] | None = None,
) -> RankResult:
    return RankResult(
        rank=rank,
        host=f"node-{rank}",
        bytes=nbytes,
        save=OpTiming.of(save, save, blocked_seconds=blocked) if save else None,
        load=OpTiming.of(load, load) if load else None,
        verified=verified,
        error=error,
    )


def _of_two(ranks: list[RankResult], total_bytes: int = 2 * GIB) -> RunSummary:
    """A run of two ranks (of which ``ranks`` reported), 2 GiB in all unless told."""
    return summarize(ranks, world_size=2, total_bytes=total_bytes)


def _two_ranks(save: list[float], load: list[float]) -> RunSummary:
    # Rank 1 is the slower one on every sample, so the collective duration is rank 1's.
    return _of_two([_rank(0, [x / 2 for x in save], [x / 2 for x in load]), _rank(1, save, load)])


def _row(table: str, label: str) -> list[str]:
    for line in table.splitlines():
        if line.startswith(label + "  ") or line == label:
            return line[len(label) :].split()
    raise AssertionError(f"no row {label!r} in:\n{table}")


OK = _two_ranks(save=[2.0, 2.0, 2.0], load=[1.0, 1.0, 4.0])


def _phased(rank: int, io: float, **kw: object) -> RankResult:
    timing = OpTiming.of([2.0, 2.0], [io, io], [0.1, 0.1])
    return RankResult(rank=rank, bytes=GIB, save=timing, load=timing, verified=True, **kw)


PHASED = _of_two([_phased(0, 0.5), _phased(1, 1.5)])


# The summaries the row table below reads, by a short name that makes readable test ids.
SUMMARIES = {"ok": OK, "phased": PHASED}


@pytest.mark.parametrize(
    ("summary", "label", "expected"),
    [
        ("ok", "world size", ["2"]),
        ("ok", "ranks reported", ["2/2"]),
        ("ok", "shard size (GiB)", ["1.00"]),
        ("ok", "total size (GiB)", ["2.00"]),
        ("ok", "save samples", ["3"]),
        ("ok", "save mean (s)", ["2.000"]),
        ("ok", "save stdev (s)", ["0.000"]),
        ("ok", "save max (s)", ["2.000"]),
        # 2 GiB in 2 s: 1 GiB/s in all; the slowest rank moved its 1 GiB in 2 s.
        ("ok", "save throughput (GiB/s)", ["1.000"]),
        ("ok", "save min per-rank (GiB/s)", ["0.500"]),
        ("ok", "save slowest rank", ["1"]),
        ("ok", "load mean (s)", ["2.000"]),
        ("ok", "load p50 (s)", ["1.000"]),
        ("ok", "load p90 (s)", ["3.400"]),
        ("ok", "load max (s)", ["4.000"]),
        ("ok", "load stdev (s)", ["1.732"]),
        ("ok", "verified", ["yes"]),
        ("ok", "status", ["ok"]),
        # Barrier to barrier both ranks took 2 s; rank 1's own I/O took 1.5 s, rank 0's 0.5 s.
        ("phased", "save mean (s)", ["2.000"]),
        ("phased", "save planning (s)", ["0.100"]),
        ("phased", "save I/O slowest rank (s)", ["1.500"]),
        ("phased", "save I/O fastest rank (s)", ["0.500"]),
        ("phased", "save collective overhead (s)", ["0.400"]),
        ("phased", "save slowest rank", ["1"]),
        ("phased", "save min per-rank (GiB/s)", ["0.667"]),
        ("phased", "load I/O slowest rank (s)", ["1.500"]),
        ("phased", "procedure", ["ckptbench"]),
    ],
)
def test_one_run_rows(summary: str, label: str, expected: list[str]) -> None:
    assert _row(report.format_table([("gcs", SUMMARIES[summary])]), label) == expected


def test_one_run_has_no_ratio_column_and_no_async_row() -> None:
    table = report.format_table([("gcs", OK)])
    assert table.splitlines()[0].split() == ["gcs"]
    assert "blocked" not in table


def test_missing_load_shows_dash_and_fails() -> None:
    s = _of_two(
        [
            _rank(0, [1.0], None, verified=None, error="RuntimeError: bucket vanished"),
            _rank(1, [1.0], None, verified=None),
        ]
    )
    table = report.format_table([("gcsfs", s)])
    assert _row(table, "load mean (s)") == ["-"]
    assert _row(table, "load throughput (GiB/s)") == ["-"]
    assert _row(table, "save mean (s)") == ["1.000"]
    assert _row(table, "status") == ["FAILED"]
    assert report.failure_lines("gcsfs", s) == [
        "gcsfs: rank 0 on node-0 failed: RuntimeError: bucket vanished"
    ]


@pytest.mark.parametrize(
    ("results", "extra", "expected"),
    [
        (
            [_rank(0, [1.0], [1.0]), _rank(1, [1.0], [1.0], verified=False, error="bad tensor 3")],
            {},
            [
                "file: rank 1 on node-1 failed: bad tensor 3",
                "file: a loaded checkpoint did not verify",
            ],
        ),
        (
            [_rank(0, None, None, verified=None, error="OSError: disk full")],
            {"missing_why": {"1": "stopped by the runner after rank 0 failed"}},
            [
                "file: rank 0 on node-0 failed: OSError: disk full",
                "file: rank 1 did not report (stopped by the runner after rank 0 failed)",
            ],
        ),
        (
            [],
            {},
            ["file: rank 0 did not report", "file: rank 1 did not report"],
        ),
    ],
)
def test_failure_lines(
    results: list[RankResult], extra: dict[str, object], expected: list[str]
) -> None:
    s = _of_two(results).model_copy(update={"extra": extra})
    assert not s.succeeded
    assert report.failure_lines("file", s) == expected
    assert _row(report.format_table([("file", s)]), "status") == ["FAILED"]


def test_success_has_no_failure_lines() -> None:
    assert report.failure_lines("gcs", OK) == []


def test_unverified_but_complete_run_says_not_checked() -> None:
    s = _of_two([_rank(0, [1.0], [1.0], verified=None), _rank(1, [1.0], [1.0], verified=None)])
    assert _row(report.format_table([("file", s)]), "verified") == ["not", "checked"]


def test_two_backends_side_by_side_with_ratio() -> None:
    fast = _two_ranks(save=[1.0, 1.0], load=[0.5, 0.5])
    slow = _two_ranks(save=[4.0, 4.0], load=[1.0, 1.0])
    table = report.format_table([("gcs", fast), ("gcsfs", slow)])
    assert table.splitlines()[0].split() == ["gcs", "gcsfs", "gcs/gcsfs"]
    assert _row(table, "save mean (s)") == ["1.000", "4.000", "0.25x"]
    assert _row(table, "save throughput (GiB/s)") == ["2.000", "0.500", "4.00x"]
    assert _row(table, "load throughput (GiB/s)") == ["4.000", "2.000", "2.00x"]
    # Sizes are the same on both sides: a ratio there would be noise.
    assert _row(table, "total size (GiB)") == ["2.00", "2.00"]
    assert _row(table, "status") == ["ok", "ok"]


def test_ratio_column_needs_both_gcs_and_gcsfs() -> None:
    table = report.format_table([("gcsfs", OK), ("file", OK)])
    assert table.splitlines()[0].split() == ["gcsfs", "file"]


def test_ratio_left_blank_when_one_side_failed() -> None:
    failed = _of_two([_rank(0, None, None, verified=None, error="x")])
    table = report.format_table([("gcs", OK), ("gcsfs", failed)])
    assert _row(table, "save mean (s)") == ["2.000", "-"]


def test_async_save_adds_stall_rows() -> None:
    s = _of_two(
        [
            _rank(0, [2.0, 2.0], [1.0, 1.0], blocked=[0.25, 0.25]),
            _rank(1, [2.0, 2.0], [1.0, 1.0], blocked=[0.5, 0.5]),
        ]
    )
    table = report.format_table([("gcs", s), ("gcsfs", OK)])
    # The mean over ranks, and the slowest rank's; the sync run has no such figure.
    assert _row(table, "save stall mean (s)") == ["0.375", "-"]
    assert _row(table, "save stall slowest rank (s)") == ["0.500", "-"]


def test_columns_are_aligned() -> None:
    table = report.format_table([("gcs", OK), ("gcsfs", OK)])
    widths = {len(line) for line in table.splitlines() if not line.startswith(("ranks", "best"))}
    # Every numeric row ends at the same column (right-aligned); ratio rows are longer.
    assert len(widths) <= 2


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="no runs"):
        report.format_table([])
    with pytest.raises(ValueError, match="unique"):
        report.format_table([("gcs", OK), ("gcs", OK)])


def test_report_includes_context_and_failures() -> None:
    failed = summarize([], world_size=1, total_bytes=GIB).model_copy(
        update={
            "extra": {
                "versions": {"torch": "2.13.0", "python": "3.11.9"},
                "node": "laptop",
                "cpu_count": 2,
                "settings": {"threads": 8, "part_size": "32 MiB"},
                "missing_why": {"0": "exit code -9 (SIGKILL)"},
            }
        }
    )
    text = report.format_report([("gcs", failed)])
    assert "node laptop, 2 CPUs" in text
    assert "versions: torch 2.13.0, python 3.11.9" in text
    assert "gcs: threads=8, part_size=32 MiB" in text
    assert text.endswith("gcs: rank 0 did not report (exit code -9 (SIGKILL))")


def test_small_runs_switch_to_mib() -> None:
    mib = 1024**2
    s = _of_two(
        [_rank(0, [0.5], [0.25], nbytes=4 * mib), _rank(1, [0.5], [0.25], nbytes=4 * mib)],
        total_bytes=8 * mib,
    )
    table = report.format_table([("gcs", s)])
    assert _row(table, "shard size (MiB)") == ["4.00"]
    assert _row(table, "total size (MiB)") == ["8.00"]
    assert _row(table, "save throughput (MiB/s)") == ["16.000"]
    assert _row(table, "load throughput (MiB/s)") == ["32.000"]
    assert "GiB" not in table


def test_shard_size_unknown_when_no_rank_reported() -> None:
    s = _of_two([])
    table = report.format_table([("gcs", s)])
    assert _row(table, "shard size (GiB)") == ["-"]
    assert _row(table, "total size (GiB)") == ["2.00"]
    assert _row(table, "verified") == ["unknown"]


def test_rank_io_seconds_are_listed_in_the_context() -> None:
    assert "gcs: save I/O seconds by rank: 0.500, 1.500" in report.format_context([("gcs", PHASED)])


def test_procedure_rows_appear_only_for_their_procedure() -> None:
    from ckptbench.workload.contract.choices import Procedure

    ref = _of_two(
        [_phased(0, 0.5, procedure=Procedure.REFERENCE), _phased(1, 1.5, procedure="reference")]
    )
    table = report.format_table([("gcs", ref)])
    assert _row(table, "procedure") == ["reference"]
    assert _row(table, "save rank-0 mean (s)") == ["2.000"]
    assert "span" not in table
    assert "rank-0" not in report.format_table([("gcs", PHASED)])


def test_stored_bytes_objects_and_metadata_beside_the_payload() -> None:
    # What rank 0 listed after the first timed save: 2 GiB of payload stored as 2.5 GiB.
    facts = {"payload_bytes": 2 * GIB, "stored_bytes": 5 * GIB // 2, "objects": 3,
             "metadata_bytes": 3 * 1024**2 // 2}  # fmt: skip
    listed = OK.model_copy(update={"extra": {"checkpoint": facts}})
    table = report.format_table([("file", listed), ("gcs", OK)])
    assert _row(table, "total size (GiB)") == ["2.00", "2.00"]
    assert _row(table, "stored size (GiB)") == ["2.50", "-"]
    assert _row(table, "stored / payload") == ["1.2500", "-"]
    assert _row(table, "stored objects") == ["3", "-"]
    assert _row(table, ".metadata (MiB)") == ["1.500", "-"]
    # Nothing listed (the operator's summaries before the listing existed): no such rows.
    assert "stored" not in report.format_table([("gcs", OK)])
