"""``bench/bench_measure.py``: a failure is loud and kept in the output file; part 2's figures are
paired as its docstring says."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _module(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # the bench scripts import each other by file name
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_failed_setup_exits_2_and_says_why_on_screen_and_in_the_file(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_measure.py"), "--dir", str(tmp_path / "missing"),
         "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = "FAILED during setup at 0 s: FileNotFoundError"
    assert line in proc.stdout
    assert line in out.read_text()


@pytest.mark.parametrize(
    ("code", "timeout", "expected"),
    [
        ("import sys; print('partial output'); sys.exit(7)", 60, "sleeper: exit code 7"),
        ("import os, signal; print('partial output', flush=True); "
         "os.kill(os.getpid(), signal.SIGKILL)", 60, "sleeper: killed by SIGKILL (the OOM killer"),
        ("import time; print('partial output', flush=True); time.sleep(60)", 2,
         "sleeper: no result after 2 s, stopped"),
    ],
)  # fmt: skip
def test_a_failing_step_names_itself_how_it_ended_and_its_last_output(
    code: str, timeout: float, expected: str
) -> None:
    bench = _module("bench_measure")
    with pytest.raises(bench.BenchFailure) as info:
        bench.child([sys.executable, "-c", code], timeout, "sleeper")
    assert str(info.value).startswith(expected), info.value
    assert "partial output" in str(info.value)


def test_a_step_outliving_its_time_is_killed_with_its_children(tmp_path: Path) -> None:
    bench = _module("bench_measure")
    pid_file = tmp_path / "grandchild"
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    with pytest.raises(bench.BenchFailure):
        bench.child([sys.executable, "-c", code], 3, "parent")
    grandchild = int(pid_file.read_text())
    # Reaped by its parent's death or killed: either way, gone within a moment.
    for _ in range(50):
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        if _is_zombie(grandchild):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"process {grandchild} outlived the bench step")


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def _doc(
    raw_write: list[float], raw_read: list[float], save: list[float], load: list[float]
) -> Any:
    gib = 1024**3
    raw = [
        {
            "write_s": w,
            "fsync_s": w / 2,
            "read_s": r,
            "nbytes": gib,
            "resident_after_evict": 0,
            "copy_s": 0.1,
        }
        for w, r in zip(raw_write, raw_read, strict=True)
    ]
    dcp = [
        {"save_s": s, "load_s": ld, "io_s": ld, "planning_s": 0.0, "cache": "dropped",
         "resident_before_evict": gib, "resident_after_evict": 0, "evictions": 1,
         "reads": {"seconds": 0.5, "nbytes": gib, "calls": 80}, "save_io_s": s,
         "writes": {"seconds": s / 4, "nbytes": gib, "calls": 80}, "fsync_s": s / 2}
        for s, ld in zip(save, load, strict=True)
    ]  # fmt: skip
    return {"shard_bytes": gib, "raw": raw, "dcp": dcp}


def test_each_ckptbench_sample_is_compared_with_the_raw_samples_on_both_sides_of_it() -> None:
    raw = _module("file_vs_raw")
    # The disk slows down steadily: the raw sample before each ckptbench sample is faster than
    # it, the one after slower. Against their mean, ckptbench is exactly as fast as raw I/O.
    doc = _doc(raw_write=[1.0, 3.0, 5.0], raw_read=[0.5, 1.5, 2.5],
               save=[2.0, 4.0], load=[1.0, 2.0])  # fmt: skip
    lines: list[str] = []
    judged = raw.summarize(doc, lines.append)
    save, load, resident = judged
    assert save.value == pytest.approx(1.0) and save.met
    assert load.value == pytest.approx(1.0) and load.met
    assert resident.value == 0 and resident.met
    assert lines[0].startswith("   round 1: save 0.500 vs raw write 0.500 GiB/s (1.00); load")


def test_pages_left_after_eviction_miss_the_target() -> None:
    raw = _module("file_vs_raw")
    doc = _doc([1.0, 1.0], [1.0, 1.0], [1.0], [1.0])
    doc["dcp"][0]["resident_after_evict"] = 4096
    *_, resident = raw.summarize(doc, lambda line: None)
    assert resident.value == 4096 and not resident.met
    assert "MISSES target" in resident.line()


def test_resident_bytes_sees_cached_pages_and_their_eviction(tmp_path: Path) -> None:
    raw = _module("file_vs_raw")
    from ckptbench.workload.storage.file import cache

    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * (1 << 20))
    path.read_bytes()
    assert raw.resident_bytes(path) == 1 << 20
    cache.evict_file(path)
    assert raw.resident_bytes(path) == 0


def test_part_2_runs_end_to_end_and_sees_the_loops_eviction(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "file_vs_raw.py"), "--dir", str(tmp_path), "--layer-size",
         "64", "--tensors", "2", "--rounds", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert len(doc["raw"]) == 2 and len(doc["dcp"]) == 1
    [sample] = doc["dcp"]
    assert sample["evictions"] == 1 and sample["cache"] == "dropped"
    assert sample["resident_before_evict"] > 0 and sample["resident_after_evict"] == 0
    # DCP's data reads, timed: at least the payload (plus torch.save's per-item records).
    assert sample["reads"]["nbytes"] >= doc["shard_bytes"] == 2 * 64 * 1000 * 4
    assert sample["writes"]["nbytes"] >= doc["shard_bytes"]
    assert 0 < sample["fsync_s"] < sample["save_io_s"]
    assert not list(tmp_path.glob("raw*.bin"))
