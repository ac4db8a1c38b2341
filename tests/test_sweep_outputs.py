"""A local sweep's outputs: the table's cells and best marks, the JSON, CSV, compare and report."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ckptbench.workload.contract.results import stats
from ckptbench.workload.contract.results.figures import summarize
from ckptbench.workload.contract.results.intervals import Best
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from ckptbench.workload.contract.results.summaries import RunSummary
from ckptbench.workload.local import report
from ckptbench.workload.local.outputs import compare, csvfile, document, plot
from ckptbench.workload.local.outputs.progress import Progress

GIB = 1024**3


def _summary(
    save: list[float] | None,
    load: list[float] | None,
    *,
    axes: dict[str, str],
    world_size: int = 2,
    settings: dict[str, Any] | None = None,
    error: str | None = None,
) -> RunSummary:
    """``world_size`` ranks of 1 GiB each, every rank taking the given seconds per sample."""
    ranks = [
        RankResult(
            rank=r,
            host=f"node-{r}",
            bytes=GIB,
            save=OpTiming.of(save, save) if save else None,
            load=OpTiming.of(load, load) if load else None,
            verified=error is None,
            error=error if r == 0 else None,
        )
        for r in range(world_size)
    ]
    s = summarize(ranks, world_size=world_size, total_bytes=world_size * GIB)
    backend = axes.get("backend", "gcs")
    extra = {"settings": {"backend": backend, **(settings or {})}, "axes": axes}
    return s.model_copy(update={"extra": extra})


def _grid() -> list[tuple[str, RunSummary]]:
    # total 2 GiB: cell 1 saves at 2 GiB/s, loads at 4; cell 2 saves at 4, loads at 1;
    # cell 3 would be best at both but failed.
    return [
        (
            "gcs threads=4",
            _summary([1.0, 1.0], [0.5, 0.5], axes={"backend": "gcs", "threads": "4"}),
        ),
        (
            "gcs threads=16",
            _summary([0.5, 0.5], [2.0, 2.0], axes={"backend": "gcs", "threads": "16"}),
        ),
        (
            "gcsfs threads=4",
            _summary([0.1], [0.1], axes={"backend": "gcsfs", "threads": "4"}, error="boom"),
        ),
    ]


def _row(table: str, label: str) -> list[str]:
    for line in table.splitlines():
        if line.startswith(label + "  "):
            return line[len(label) :].split()
    raise AssertionError(f"no row {label!r} in:\n{table}")


# ---------------------------------------------------------------------------------------------
# The table


def test_table_heads_cells_by_number_and_gives_each_varied_setting() -> None:
    table = report.format_table(_grid())
    assert table.splitlines()[0].split() == ["cell", "1/3", "cell", "2/3", "cell", "3/3"]
    assert _row(table, "backend") == ["gcs", "gcs", "gcsfs"]
    assert _row(table, "threads") == ["4", "16", "4"]


def test_best_row_names_the_fastest_succeeded_cell_for_save_and_for_load() -> None:
    runs = _grid()
    # Every sample alike: intervals of no width, so each best is told apart from the rest.
    assert report.best_cells(runs) == {"save": Best(1, ()), "load": Best(0, ())}
    line = next(ln for ln in report.format_table(runs).splitlines() if ln.startswith("best"))
    # Columns are right-aligned: cell 1 holds "load", cell 2 "save", the failed cell nothing.
    assert line.split()[2:] == ["load", "save"]


def test_table_gives_each_mean_its_interval_unbounded_or_none() -> None:
    runs = [
        # 0.1 and 1.9 s: the mean's interval reaches 0, so the rate's is unbounded above.
        ("gcs", _summary([0.1, 1.9], [1.0, 1.0], axes={"backend": "gcs"})),
        ("gcsfs", _summary([1.0, 1.2, 1.1], [0.5, 0.5], axes={"backend": "gcsfs"})),
    ]
    table = report.format_table(runs)
    gcs, gcsfs = runs[0][1].save, runs[1][1].save
    assert gcs is not None and gcsfs is not None
    ci, other = gcs.throughput_bytes_per_second_ci, gcsfs.throughput_bytes_per_second_ci
    assert ci is not None and ci.high is None and other is not None and other.high is not None
    assert _row(table, "save throughput 95% CI (GiB/s)") == [
        f"[{ci.low / GIB:.3f},",
        "inf]",
        f"[{other.low / GIB:.3f},",
        f"{other.high / GIB:.3f}]",
    ]
    seconds = gcs.mean_seconds_ci
    assert seconds is not None and seconds.low == 0.0
    assert _row(table, "save mean 95% CI (s)")[:2] == ["[0.000,", f"{seconds.high:.3f}]"]
    rows = list(csv.DictReader(io.StringIO(csvfile.to_csv(runs))))
    assert rows[0]["save_throughput_gib_per_second_ci_high"] == "inf"
    assert float(rows[0]["save_throughput_gib_per_second_ci_low"]) == ci.low / GIB
    # Saves overlap (gcs's reaches infinity): indistinguishable; loads have no spread: gcsfs.
    assert _row(table, "best (throughput)") == ["(save)", "(save),load"]
    notes = table.splitlines()[-2:]
    assert notes == [
        "best save: indistinguishable among gcs, gcsfs (95% CIs overlap, or n/a with one sample)",
        "best load: gcsfs (its 95% CI is above every other cell's)",
    ]


def test_one_sample_has_no_interval_in_table_or_csv() -> None:
    runs = [("gcs", _summary([1.0], [1.0], axes={}))]
    table = report.format_table(runs)
    assert _row(table, "save mean 95% CI (s)") == ["n/a"]
    assert _row(table, "load throughput 95% CI (GiB/s)") == ["n/a"]
    [row] = list(csv.DictReader(io.StringIO(csvfile.to_csv(runs))))
    assert row["save_mean_seconds_ci_low"] == row["save_mean_seconds_ci_high"] == ""


def test_no_best_row_with_fewer_than_two_succeeded_cells() -> None:
    runs = _grid()
    assert "best" not in report.format_table([runs[0], runs[2]])


def test_backend_only_sweep_keeps_backend_columns() -> None:
    runs = [
        ("gcs", _summary([1.0], [1.0], axes={"backend": "gcs"})),
        ("gcsfs", _summary([2.0], [2.0], axes={"backend": "gcsfs"})),
    ]
    table = report.format_table(runs)
    assert table.splitlines()[0].split() == ["gcs", "gcsfs", "gcs/gcsfs"]


# ---------------------------------------------------------------------------------------------
# JSON document


def test_document_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    runs = _grid()
    document.write_json(path, runs, ok=False)
    raw = json.loads(path.read_text())
    assert raw["cells"] == [label for label, _ in runs]
    assert [r["backend"] for r in raw["runs"]] == ["gcs", "gcs", "gcsfs"]
    doc = document.read_json(path)
    assert doc.succeeded is False
    assert doc.runs == runs


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{", "not JSON"),
        ('{"cells": []}', "no 'runs'"),
        ('{"runs": []}', "holds no runs"),
        ('{"runs": [{"world_size": 2}]}', "no 'cell' label"),
        ('{"runs": [{"cell": "gcs", "world_size": "two"}]}', "runs[0].world_size"),
    ],
)
def test_document_errors_name_file_and_field(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(document.DocumentError) as info:
        document.read_json(path)
    assert str(path) in str(info.value) and reason in str(info.value)


# ---------------------------------------------------------------------------------------------
# CSV


def test_csv_has_a_row_per_cell_with_settings_and_figures() -> None:
    runs = _grid()
    runs[0] = (
        runs[0][0],
        runs[0][1].model_copy(
            update={"extra": {**runs[0][1].extra, "settings": {"backend": "gcs", "threads": 4}}}
        ),
    )
    rows = list(csv.DictReader(io.StringIO(csvfile.to_csv(runs))))
    assert [r["cell"] for r in rows] == [label for label, _ in runs]
    assert [r["cell_index"] for r in rows] == ["1", "2", "3"]
    assert [r["threads"] for r in rows] == ["4", "", ""]  # only where the setting applies
    first = rows[0]
    assert first["backend"] == "gcs" and first["world_size"] == "2"
    assert float(first["save_mean_seconds"]) == 1.0
    # 2 GiB in a 1 s save, 0.5 s load.
    assert float(first["save_throughput_gib_per_second"]) == 2.0
    assert float(first["load_throughput_gib_per_second"]) == 4.0
    assert rows[2]["succeeded"] == "false"
    # Not the mlperf procedure: MLPerf's columns are there, empty, not our figures renamed.
    assert first["checkpoint_write_bw_gibps"] == first["checkpoint_size_GB"] == ""


def _mlperf_rank(rank: int, starts: list[float], seconds: list[float], io: float) -> RankResult:
    ends = [a + b for a, b in zip(starts, seconds, strict=True)]
    t = OpTiming.of(seconds, [io] * len(seconds), started_at=starts, ended_at=ends)
    return RankResult(rank=rank, bytes=GIB, save=t, load=t, procedure="mlperf")


def test_csv_mlperf_columns_are_the_summarys_mlperf_block() -> None:
    # Rank 1 starts 0.5 s after rank 0 each sample: spans (1.5, 3.5 s) differ from the
    # collective durations (1, 3 s), so a CSV computing MLPerf's figures its own way disagrees.
    ranks = [
        _mlperf_rank(0, [100.0, 200.0], [1.0, 3.0], 0.5),
        _mlperf_rank(1, [100.5, 200.5], [1.0, 3.0], 0.8),
    ]
    s = summarize(ranks, world_size=2, total_bytes=2 * GIB)
    assert s.mlperf is not None
    [row] = list(csv.DictReader(io.StringIO(csvfile.to_csv([("gcs", s)]))))
    for key, value in s.mlperf.items():
        assert float(row[key]) == value, key
    # 2 GiB over spans of 1.5 and 3.5 s: mean span 2.5 s, per-sample 4/3 and 4/7 GiB/s.
    assert float(row["checkpoint_write_bw_gibps"]) == pytest.approx(2 / 2.5, abs=1e-6)
    assert float(row["save_checkpoint_io_mean_GB_per_second"]) == pytest.approx(
        (4 / 3 + 4 / 7) / 2, abs=1e-6
    )
    assert float(row["save_span_mean_seconds"]) == 2.5
    assert float(row["save_mean_seconds"]) == 2.0  # the collective mean, under its own name


# ---------------------------------------------------------------------------------------------
# compare


def _doc(tmp_path: Path, name: str, runs: list[tuple[str, RunSummary]]) -> Path:
    path = tmp_path / name
    document.write_json(path, runs, ok=True)
    return path


def test_compare_prints_ratios_against_the_first_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _doc(
        tmp_path,
        "before.json",
        [
            ("gcs", _summary([2.0], [1.0], axes={})),
            ("gcsfs", _summary([4.0], [4.0], axes={})),
        ],
    )
    after = _doc(
        tmp_path,
        "after.json",
        [
            ("gcs", _summary([1.0], [1.0], axes={})),
            ("file", _summary([1.0], [1.0], axes={}, world_size=1)),
        ],
    )
    assert compare.main([str(before), str(after)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["A", "B", "B/A", "(95%", "CI)"]
    # The cells' settings do not tell them apart (both "gcs"): they line up by their labels.
    gcs = lines.index("gcs")
    # One sample each: no interval of the ratio.
    assert lines[gcs + 1].split()[-4:] == ["1.000", "2.000", "2.00x", "n/a"]  # save doubled
    assert lines[gcs + 2].split()[-2:] == ["1.00x", "n/a"]  # load unchanged
    assert lines[gcs + 3].split()[-4:] == ["2.000", "1.000", "0.50x", "n/a"]  # seconds halved
    gcsfs = lines.index("gcsfs")
    assert lines[gcsfs + 1].split()[-2:] == ["0.500", "-"]  # only in A: no ratio
    assert f"A = {before}" in out and f"B = {after}" in out


def test_compare_notes_cells_that_differ_in_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _doc(tmp_path, "a.json", [("gcs", _summary([1.0], [1.0], axes={}))])
    b = _doc(tmp_path, "b.json", [("gcs", _summary([1.0], [1.0], axes={}, world_size=4))])
    assert compare.main([str(a), str(b)]) == 0
    assert "note: gcs: world size differs (A 2, B 4)" in capsys.readouterr().out


def test_compare_scales_the_throughput_ratios_interval_by_each_cells_own_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # B saves twice the bytes (4 ranks of 1 GiB) in the same seconds: twice the throughput, and
    # an interval around twice, not around the ratio of the seconds alone.
    a = _doc(tmp_path, "a.json", [("gcs", _summary([2.0, 2.0], [1.0, 1.0], axes={}))])
    b = _doc(tmp_path, "b.json", [("gcs", _summary([2.0, 2.0], [1.0, 1.0], axes={}, world_size=4))])
    assert compare.main([str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("gcs")
    assert lines[at + 1].split()[-5:] == ["1.000", "2.000", "2.00x", "[2.00,", "2.00]"]
    assert lines[at + 2].split()[-5:] == ["2.000", "4.000", "2.00x", "[2.00,", "2.00]"]


def test_compare_lines_up_single_runs_of_different_backends_and_names_what_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "no cell appears in every file", since the cells are named by their backend.
    # Single runs: no axes recorded, each cell named by its backend.
    a = _doc(
        tmp_path,
        "a.json",
        [("file", _summary([2.0, 2.0], [1.0, 1.0], axes={}, settings={"backend": "file"}))],
    )
    b = _doc(
        tmp_path,
        "b.json",
        [("gcs", _summary([1.0, 1.0], [1.0, 1.0], axes={}, settings={"backend": "gcs"}))],
    )
    assert compare.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    at = lines.index("file vs gcs")
    # No spread: the ratio's interval is the ratio itself.
    assert lines[at + 1].split()[-5:] == ["1.000", "2.000", "2.00x", "[2.00,", "2.00]"]
    assert lines[at + 3].split()[-5:] == ["2.000", "1.000", "0.50x", "[0.50,", "0.50]"]
    assert "note: file vs gcs: settings differ: backend (A file, B gcs)" in out


def test_compare_lines_up_two_sweeps_by_their_axis_whatever_their_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def cell(backend: str, threads: int, seconds: float) -> tuple[str, RunSummary]:
        # Labels differ between the files: only the settings can line the cells up. Each cell
        # has its own run id, which names the run and is no setting to match by.
        return (
            f"{backend} threads={threads}",
            _summary(
                [seconds, seconds],
                [seconds, seconds],
                axes={"threads": str(threads)},
                settings={"backend": backend, "threads": threads, "run_id": f"{backend}{threads}"},
            ),
        )

    a = _doc(tmp_path, "a.json", [cell("gcs", 4, 1.0), cell("gcs", 16, 2.0)])
    b = _doc(tmp_path, "b.json", [cell("gcsfs", 16, 1.0), cell("gcsfs", 4, 4.0)])
    assert compare.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    four, sixteen = lines.index("threads=4"), lines.index("threads=16")
    assert lines[four + 3].split()[-5:] == ["1.000", "4.000", "4.00x", "[4.00,", "4.00]"]
    assert lines[sixteen + 3].split()[-5:] == ["2.000", "1.000", "0.50x", "[0.50,", "0.50]"]
    # The run id names each run: no difference worth a note.
    assert "note: threads=4: settings differ: backend (A gcs, B gcsfs)\n" in out + "\n"


def test_compare_lines_up_a_single_run_with_the_sweep_cell_of_its_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = _doc(
        tmp_path,
        "sweep.json",
        [
            (f"threads={t}", _summary([1.0, 1.0], [1.0, 1.0], axes={"threads": str(t)},
                                      settings={"threads": t}))
            for t in (4, 16)
        ],
    )  # fmt: skip
    single = _doc(
        tmp_path,
        "one.json",
        [("gcs", _summary([2.0, 2.0], [1.0, 1.0], axes={}, settings={"threads": 16}))],
    )
    assert compare.main([str(sweep), str(single)]) == 0
    lines = capsys.readouterr().out.splitlines()
    sixteen = lines.index("threads=16")
    assert lines[sixteen + 3].split()[-5:] == ["1.000", "2.000", "2.00x", "[2.00,", "2.00]"]
    four = lines.index("threads=4")
    assert lines[four + 3].split()[-2:] == ["1.000", "-"]


def test_compare_gives_each_ratio_its_delta_method_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _doc(tmp_path, "a.json", [("gcs", _summary([1.9, 2.1, 1.9, 2.1], [1.0, 1.0], axes={}))])
    b = _doc(tmp_path, "b.json", [("gcs", _summary([0.95, 1.05, 0.95, 1.05], [1.0], axes={}))])
    assert compare.main([str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # By hand: means 2 and 1, standard errors s/sqrt(4) = 0.057735 and 0.028868, relative 0.028868
    # each; ratio 0.5 with relative standard error 0.028868 * sqrt(2); Welch-Satterthwaite df =
    # (se_a^2 + se_b^2)^2 / (se_a^4/3 + se_b^4/3) = 4.4118.
    va, vb = 0.057735**2, 0.028868**2
    t = stats.t_quantile(0.975, (va + vb) ** 2 / (va**2 / 3 + vb**2 / 3))
    half = t * 0.5 * 0.028868 * 2**0.5
    at = lines.index("gcs")
    save_rate, load_rate, save_mean = lines[at + 1], lines[at + 2], lines[at + 3]
    assert save_mean.split()[-3:] == ["0.50x", f"[{0.5 - half:.2f},", f"{0.5 + half:.2f}]"]
    assert save_rate.split()[-3:] == [
        "2.00x",
        f"[{1 / (0.5 + half):.2f},",
        f"{1 / (0.5 - half):.2f}]",
    ]
    assert load_rate.split()[-2:] == ["1.00x", "n/a"]  # one load sample in B


def test_compare_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _doc(
        tmp_path,
        "a.json",
        [
            ("gcs threads=4", _summary([1.0], [1.0], axes={}, settings={"threads": 4})),
            ("gcs threads=8", _summary([1.0], [1.0], axes={}, settings={"threads": 8})),
        ],
    )
    b = _doc(
        tmp_path,
        "b.json",
        [("gcs threads=16", _summary([1.0], [1.0], axes={}, settings={"threads": 16}))],
    )
    assert compare.main([str(a)]) == 2
    assert "2 to 26 results files" in capsys.readouterr().err
    assert compare.main([str(a), str(tmp_path / "missing.json")]) == 2
    assert "missing.json: cannot read it" in capsys.readouterr().err
    assert compare.main([str(a), str(b)]) == 1
    assert "no cell appears in every file" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# report (image)


def _document(tmp_path: Path, runs: list[tuple[str, RunSummary]]) -> document.Document:
    return document.read_json(_doc(tmp_path, "r.json", runs))


def test_report_draws_throughput_per_cell_and_marks_the_best(tmp_path: Path) -> None:
    fig = plot.draw(_document(tmp_path, _grid()))
    per_cell, save_load = fig.axes  # one world size: no scaling panel
    heights = [round(bar.get_height(), 3) for bar in per_cell.patches]  # type: ignore[attr-defined]
    # save bars then load bars, in GiB/s; the failed cell draws nothing.
    assert heights == [2.0, 4.0, 0.0, 4.0, 1.0, 0.0]
    notes = sorted(t.get_text() for t in per_cell.texts)
    assert notes == ["best load", "best save"]
    # save vs load: one point per succeeded cell.
    assert len(save_load.collections) == 2


def _drawn(ax: object) -> int:
    """What a panel draws: bars, lines and point sets (an empty panel has none)."""
    return len(ax.patches) + len(ax.get_lines()) + len(ax.collections)  # type: ignore[attr-defined]


def test_report_draws_only_the_panels_it_has_data_for(tmp_path: Path) -> None:
    from ckptbench.workload.contract.results.summaries import RankSpread

    one_size = _document(tmp_path, _grid())
    assert plot.panel_rows(one_size) == [["per cell", "save vs load"]]
    # An async save without a training step: its costs, but no overhead or step-time panel.
    spread = RankSpread(
        mean_seconds=0.25, slowest_rank=0, slowest_rank_seconds=0.25, max_seconds=0.25
    )
    thread = _summary([2.0], [1.0], axes={"save-mode": "thread"})
    assert thread.save is not None
    thread = thread.model_copy(update={"save": thread.save.model_copy(update={"stall": spread})})
    no_training = _document(tmp_path, [("thread", thread)])
    assert plot.panel_rows(no_training) == [["per cell", "save vs load"], ["save costs"]]
    # Only saves (no load): no save-against-load panel.
    saves_only = _summary([2.0], [1.0], axes={}).model_copy(update={"load": None})
    assert plot.panel_rows(_document(tmp_path, [("s", saves_only)])) == [["per cell"]]
    for doc in (one_size, no_training):
        fig = plot.draw(doc)
        assert len(fig.axes) == sum(len(row) for row in plot.panel_rows(doc))
        assert all(_drawn(ax) for ax in fig.axes), [ax.get_title() for ax in fig.axes]


def test_report_draws_scaling_per_group_of_other_settings(tmp_path: Path) -> None:
    runs = [
        (
            f"{b} world-size={n}",
            _summary([1.0], [1.0], axes={"backend": b, "world-size": str(n)}, world_size=n),
        )
        for b in ("gcs", "gcsfs")
        for n in (1, 2, 4)
    ]
    assert set(plot.scaling_groups(runs)) == {"backend=gcs", "backend=gcsfs"}
    scaling = plot.draw(_document(tmp_path, runs)).axes[2]
    lines = scaling.get_lines()
    assert len(lines) == 4  # save and load for each backend
    assert np.asarray(lines[0].get_xdata(), dtype=float).tolist() == [1, 2, 4]
    # n ranks of 1 GiB in 1 s: n GiB/s.
    ys = np.asarray(lines[0].get_ydata(), dtype=float).tolist()
    assert ys == pytest.approx([1.0, 2.0, 4.0])


@pytest.mark.parametrize(
    ("suffix", "magic"), [(".png", b"\x89PNG"), (".svg", b"<?xml"), (".html", b"<!doctype html>")]
)
def test_report_writes_each_format(tmp_path: Path, suffix: str, magic: bytes) -> None:
    src = _doc(tmp_path, "r.json", _grid())
    out = tmp_path / f"out{suffix}"
    assert plot.main([str(src), "-o", str(out)]) == 0
    data = out.read_bytes()
    assert data.startswith(magic)
    if suffix == ".html":
        assert b"<svg" in data and b"gcs threads=16" in data


def test_report_marks_no_best_where_intervals_overlap_and_draws_each_interval(
    tmp_path: Path,
) -> None:
    runs = [
        ("gcs", _summary([1.0, 1.2, 0.8], [1.0, 1.0], axes={"backend": "gcs"})),
        ("gcsfs", _summary([1.1, 0.9, 1.0], [2.0, 2.0], axes={"backend": "gcsfs"})),
    ]
    per_cell = plot.draw(_document(tmp_path, runs)).axes[0]
    # Load: no spread, told apart (gcs at 2 GiB/s beats 1). Save: 2 GiB/s either way, with
    # overlapping intervals: no mark, and the title says so.
    assert [t.get_text() for t in per_cell.texts] == ["best load"]
    title = per_cell.get_title()
    assert "best save: indistinguishable among 1, 2" in title
    # Each bar's error bar spans its throughput interval (GiB/s).
    save = runs[0][1].save
    assert save is not None and save.throughput_bytes_per_second_ci is not None
    ci = save.throughput_bytes_per_second_ci
    assert ci.high is not None
    segments = [c for c in per_cell.collections if c.get_segments()]  # type: ignore[attr-defined]
    spans = [tuple(seg[:, 1]) for c in segments for seg in c.get_segments()]  # type: ignore[attr-defined]
    assert any(
        lo == pytest.approx(ci.low / GIB) and hi == pytest.approx(ci.high / GIB) for lo, hi in spans
    ), spans


def test_report_draws_several_files_as_one_lettered_like_compare(tmp_path: Path) -> None:
    a = _doc(tmp_path, "a.json", [("file", _summary([1.0, 1.0], [1.0, 1.0], axes={}))])
    b = _doc(tmp_path, "b.json", [("gcs", _summary([2.0, 2.0], [2.0, 2.0], axes={}))])
    out = tmp_path / "both.html"
    assert plot.main([str(a), str(b), "-o", str(out)]) == 0
    page = out.read_text()
    assert "ckptbench: a.json + b.json" in page
    assert "A: file" in page and "B: gcs" in page
    assert f"A = {a}" in page and f"B = {b}" in page
    assert "B/A (95% CI)" in page  # the comparison of the two files
    per_cell = plot.draw(plot.merge([document.read_json(a), document.read_json(b)])).axes[0]
    ticks = [t.get_text() for t in per_cell.get_xticklabels()]
    assert ticks == ["1: A: file", "2: B: gcs"]


def test_report_refuses_unknown_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _doc(tmp_path, "r.json", _grid())
    assert plot.main([str(src), "-o", str(tmp_path / "out.pdf")]) == 2
    assert "-o: unknown format '.pdf'" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# progress


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _config(samples: int, warmup: int) -> Any:
    from ckptbench.workload.contract.config import WorkloadConfig

    return WorkloadConfig(
        checkpoint_path="/tmp/x",
        backend="file",
        world_size=1,
        padding_size=1,
        sample_count=samples,
        warmup_samples=warmup,
    )


def test_progress_counts_rank_0_loads_and_gives_an_eta() -> None:
    out, clock = io.StringIO(), _Clock()
    progress = Progress(3, out, clock=clock, quiet_seconds=10)
    assert progress.start_cell(0, "gcs", _config(3, 1)) == "cell 1/3 "
    clock.now = 5
    progress.line(0, "[rank 0] load warm-up 1/1: 1.000 s")
    assert out.getvalue() == ""  # a short cell stays quiet
    clock.now = 12
    progress.line(1, "[rank 1] load 1/3: 1.000 s")  # only rank 0 counts
    progress.line(0, "[rank 0] save 1/3: 1.000 s")  # only loads end a sample
    progress.line(0, "[rank 0] load 1/3: 1.000 s")
    # 2 of 4 done; 7 s since the first sample ended: 7 s a sample, 2 left.
    assert out.getvalue() == "cell 1/3 gcs: sample 2/4 done, 12 s in, ETA 14 s\n"
    progress.end_cell()
    progress.start_cell(1, "gcsfs", _config(3, 1))
    clock.now = 30
    progress.line(0, "[rank 0] load warm-up 1/1: 1.000 s")
    # 18 s for one of 4 samples (start-up included): 54 s left here, plus one more 12 s cell.
    assert out.getvalue().splitlines()[-1] == (
        "cell 2/3 gcsfs: sample 1/4 done, 18 s in, ETA 54 s (all cells: ~1m06s)"
    )


def test_runner_hands_every_rank_line_to_the_watcher() -> None:
    import os
    import sys
    import threading

    from ckptbench.workload.local.runner import run_ranks

    seen: list[tuple[int, str]] = []
    lock = threading.Lock()

    def watch(rank: int, text: str) -> None:
        with lock:
            seen.append((rank, text))

    script = "import os; print('line of', os.environ['CKPTBENCH_RANK'])"
    run_ranks(
        _config(1, 0).model_copy(update={"world_size": 2, "padding_size": 2}),
        stop=threading.Event(),
        out=io.StringIO(),
        label="t",
        timeout=60,
        command=[sys.executable, "-c", script],
        base_env=dict(os.environ),
        watch=watch,
    )
    # Rank 1's line is not shown (not an error) but is still watched.
    assert sorted(seen) == [(0, "line of 0"), (1, "line of 1")]


def test_report_draws_what_checkpoints_cost_training_when_a_cell_measured_it(
    tmp_path: Path,
) -> None:
    from ckptbench.workload.contract.results.summaries import RankSpread, TrainSummary

    def spread(slowest: float) -> RankSpread:
        return RankSpread(
            mean_seconds=slowest, slowest_rank=0, slowest_rank_seconds=slowest, max_seconds=slowest
        )

    sync = _summary([2.0], [1.0], axes={"save-mode": "sync"})
    thread = _summary([2.0], [1.0], axes={"save-mode": "thread"})
    assert thread.save is not None
    train = TrainSummary(
        every=10, intervals=2, matrix=512, step_threads=1, cpus=2, step_seconds=0.1,
        in_flight_step_seconds=0.125, in_flight_steps=18, wait=spread(0.5), stall=spread(0.25),
        overhead=0.05, overhead_slowest_rank=0, overhead_rank_mean=0.04, overhead_max=0.07,
    )  # fmt: skip
    thread = thread.model_copy(
        update={
            "save": thread.save.model_copy(
                update={"stall": spread(0.25), "background": spread(1.5)}
            ),
            "train": train,
        }
    )
    fig = plot.draw(_document(tmp_path, [("sync", sync), ("thread", thread)]))
    assert len(fig.axes) == 5  # one world size: no scaling panel
    costs, overhead, steps = fig.axes[2:]
    heights = [round(b.get_height(), 3) for b in costs.patches]  # type: ignore[attr-defined]
    # stall (sync: its whole save), staging, background; per cell.
    assert heights == [sync.save.mean_seconds if sync.save else 0.0, 0.25, 0.0, 0.0, 0.0, 1.5]
    bars = [round(b.get_height(), 3) for b in overhead.patches]  # type: ignore[attr-defined]
    assert bars == [0.0, 5.0]  # percent
    assert [line.get_label() for line in overhead.get_lines()] == ["CheckFreq's 3.5%"]
    assert [round(b.get_height(), 3) for b in steps.patches] == [0.0, 100.0, 0.0, 125.0]  # type: ignore[attr-defined]
