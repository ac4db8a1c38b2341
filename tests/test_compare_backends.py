"""Two real runs of different backends, each its own ``--json`` file: ``compare`` lines them up and
gives each ratio its interval, ``report`` draws both, and the ranks' stderr holds none of the
storage libraries' known noise unless ``--verbose`` asks for it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.workers import ckptbench

pytestmark = pytest.mark.slow

TINY = ["--world-size", "1", "--layer-size", "50", "--padding-size", "2", "--warmup", "0"]
# gcsfs against the emulator: its moveTo refusal and fallback, once per save, before the change.
NOISE = ("Traceback", "Failed to move file using moveTo API", "non-retriable exception")


def _run(out: Path, name: str, *argv: str) -> tuple[Path, str]:
    path = out / f"{name}.json"
    proc = ckptbench("run", *TINY, *argv, "--json", str(path), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return path, proc.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    out = tmp_path_factory.mktemp("backends")
    return {
        "file": _run(out, "file", "--samples", "2", "--storage", str(out / "ckpt")),
        "gcsfs": _run(out, "gcsfs", "--samples", "2", "--backend", "gcsfs"),
        "verbose": _run(out, "verbose", "--samples", "1", "--backend", "gcsfs", "--verbose"),
    }


def test_compare_lines_up_runs_of_different_backends(runs: dict[str, tuple[Path, str]]) -> None:
    proc = ckptbench("compare", str(runs["file"][0]), str(runs["gcsfs"][0]), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["A", "B", "B/A", "(95%", "CI)"]
    assert lines[1] == "file vs gcsfs"
    # Two samples each: every ratio has an interval, and it holds the ratio.
    for line in lines[2:6]:
        m = re.search(r"(\d+\.\d+)x \[(\d+\.\d+), (\d+\.\d+|inf)\]$", line)
        assert m is not None, line
        ratio, low, high = m.groups()
        assert float(low) <= float(ratio) <= float(high if high != "inf" else "1e300"), line
    assert "settings differ: backend (A file, B gcsfs)" in proc.stdout
    assert "no cell appears in every file" not in proc.stderr


def test_each_json_holds_the_intervals(runs: dict[str, tuple[Path, str]]) -> None:
    [run] = json.loads(runs["file"][0].read_text())["runs"]
    for op in ("save", "load"):
        ci = run[op]["mean_seconds_ci"]
        assert ci["low"] <= run[op]["mean_seconds"] <= ci["high"]
        assert (
            run[op]["throughput_bytes_per_second_ci"]["low"]
            <= (run[op]["throughput_bytes_per_second"])
        )
    [one] = json.loads(runs["verbose"][0].read_text())["runs"]
    assert one["save"]["mean_seconds_ci"] is None  # one sample: no interval


def test_report_draws_both_files(runs: dict[str, tuple[Path, str]], tmp_path: Path) -> None:
    page = tmp_path / "both.html"
    proc = ckptbench(
        "report", str(runs["file"][0]), str(runs["gcsfs"][0]), "-o", str(page), timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert "A: file" in text and "B: gcsfs" in text and "file vs gcsfs" in text


def test_the_libraries_known_noise_is_hidden_and_counted(
    runs: dict[str, tuple[Path, str]],
) -> None:
    stderr = runs["gcsfs"][1]
    for noise in NOISE:
        assert noise not in stderr, stderr
    # Each of the two saves' refusal and fallback, counted once at the rank's end.
    assert (
        "4 known library log message(s) hidden (gcsfs moveTo refusal (emulator) x2, "
        "gcsfs moveTo fallback x2); 'ckptbench run --verbose' shows them"
    ) in stderr


def test_verbose_shows_the_noise(runs: dict[str, tuple[Path, str]]) -> None:
    stderr = runs["verbose"][1]
    for noise in NOISE:
        assert noise in stderr, stderr
    assert "hidden" not in stderr
