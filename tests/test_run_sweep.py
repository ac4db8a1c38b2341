"""A real local sweep: ``ckptbench run --backend gcs,gcsfs --threads 4,16`` on the embedded
emulator, with real ranks, then ``compare`` and ``report`` on what it wrote."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from ckptbench.workload.local.outputs.progress import SAMPLE_DONE
from tests.workers import ckptbench

pytestmark = pytest.mark.slow

TINY = ["--world-size", "1", "--layer-size", "50", "--padding-size", "2", "--samples", "2"]
TINY += ["--warmup", "0"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    out = tmp_path_factory.mktemp("sweep")
    j, c = out / "sweep.json", out / "sweep.csv"
    cmd = ["run", *TINY, "--backend", "gcs,gcsfs", "--threads", "4,16"]
    proc = ckptbench(*cmd, "--json", str(j), "--csv", str(c), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return j, c, proc.stdout + "\n" + proc.stderr


CELLS = [("gcs", "4"), ("gcs", "16"), ("gcsfs", "4"), ("gcsfs", "16")]


def test_json_holds_every_cell_with_its_settings(sweep: tuple[Path, Path, str]) -> None:
    doc = json.loads(sweep[0].read_text())
    assert doc["succeeded"] is True
    assert doc["cells"] == [f"{b} threads={t}" for b, t in CELLS]
    for run, (backend, threads) in zip(doc["runs"], CELLS, strict=True):
        assert run["backend"] == backend
        assert run["extra"]["axes"] == {"backend": backend, "threads": threads}
        assert run["extra"]["settings"]["backend"] == backend
        if backend == "gcs":  # gcsfs has no thread setting of ours
            assert run["extra"]["settings"]["threads"] == int(threads)
        assert run["verified"] is True and run["error_count"] == 0
        assert run["save"]["throughput_bytes_per_second"] > 0


def test_csv_has_a_row_per_cell(sweep: tuple[Path, Path, str]) -> None:
    rows = list(csv.DictReader(sweep[1].open()))
    assert [(r["backend"], r["cell"]) for r in rows] == [(b, f"{b} threads={t}") for b, t in CELLS]
    assert [r["threads"] for r in rows] == ["4", "16", "", ""]
    assert all(float(r["save_throughput_gib_per_second"]) > 0 for r in rows)
    # MLPerf's columns hold figures of MLPerf's procedure only.
    assert all(r["checkpoint_write_bw_gibps"] == "" for r in rows)
    assert all(r["succeeded"] == "true" for r in rows)


def test_progress_and_table_show_cells(sweep: tuple[Path, Path, str]) -> None:
    text = sweep[2]
    for i, (b, t) in enumerate(CELLS, start=1):
        assert f"cell {i}/4 {b} threads={t}: 1 ranks" in text
    header = next(line for line in text.splitlines() if line.lstrip().startswith("cell 1/4"))
    assert header.split() == ["cell", "1/4", "cell", "2/4", "cell", "3/4", "cell", "4/4"]
    assert "best (throughput)" in text


def test_progress_counts_the_lines_the_ranks_print(sweep: tuple[Path, Path, str]) -> None:
    """The progress reads rank 0's load lines: the loop must still print them as it expects."""
    for b, t in CELLS:
        prefix = f"{b} threads={t}: "
        done = [
            line
            for line in sweep[2].splitlines()
            if line.startswith(prefix) and SAMPLE_DONE.match(line.removeprefix(prefix))
        ]
        assert len(done) == 2, sweep[2]


def test_compare_and_report_on_the_sweep(sweep: tuple[Path, Path, str], tmp_path: Path) -> None:
    proc = ckptbench("compare", str(sweep[0]), str(sweep[0]), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("1.00x") == 4 * 4  # 4 figures of 4 cells, each against itself
    png = tmp_path / "sweep.png"
    proc = ckptbench("report", str(sweep[0]), "-o", str(png), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes().startswith(b"\x89PNG")
