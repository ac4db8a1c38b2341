"""A SIGKILLed runner takes its ranks and the emulator with it; the next run reclaims them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ckptbench.workload.local import orphans
from ckptbench.workload.local.emulator import GcsEmulator
from tests.workers import ROOT, base_env, children_by_parent

pytestmark = pytest.mark.timeout(120)


def _children(pid: int) -> list[int]:
    return children_by_parent().get(pid, [])


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def _wait_for(what: str, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_sigkilled_runner_takes_ranks_and_emulator_with_it(tmp_path: Path) -> None:
    env = base_env()
    env["TMPDIR"] = str(tmp_path)  # the runner's scratch folders go here
    runner = subprocess.Popen(
        [sys.executable, "-m", "ckptbench.cli", "run", "--world-size", "2", "--samples", "200",
         "--warmup", "0", "--layer-size", "100", "--padding-size", "2", "--no-verify"],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    children: list[int] = []
    try:
        # The emulator and both ranks: three children.
        _wait_for("the emulator and two ranks", lambda: len(_children(runner.pid)) >= 3, 60)
        children = _children(runner.pid)
        scratch = sorted(p.name.split("-")[1] for p in tmp_path.glob(f"ckptbench-*-{runner.pid}-*"))
        assert scratch == ["gcs", "ranks"]
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        _wait_for("the children to die", lambda: all(_gone(c) for c in children), 10)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        for pid in children:  # whatever the outcome, nothing of this test keeps running
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    left = list(tmp_path.glob(f"ckptbench-*-{runner.pid}-*"))
    assert len(left) == 2  # SIGKILL ran no cleanup ...
    assert sorted(orphans.reclaim_stale(str(tmp_path))) == sorted(left)  # ... the next run does
    # Nothing at all is left in $TMPDIR: the emulator's own temporary files were in its folder.
    assert list(tmp_path.iterdir()) == []


def test_the_emulators_temporary_files_go_in_its_own_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fake-gcs-server stages objects in $TMPDIR; a SIGKILLed one left a part-sized file there
    # that no run removed. Its $TMPDIR is now inside the folder the next run reclaims.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read $TMPDIR
    with GcsEmulator() as emu:
        assert emu.pid is not None
        env = dict(
            item.split(b"=", 1)
            for item in Path(f"/proc/{emu.pid}/environ").read_bytes().split(b"\0")
            if b"=" in item
        )
        emulator_tmp = Path(env[b"TMPDIR"].decode())
        (scratch,) = tmp_path.glob(f"ckptbench-gcs-{os.getpid()}-*")
        assert emulator_tmp == scratch / "tmp" and emulator_tmp.is_dir()
    assert list(tmp_path.iterdir()) == []


def test_live_runners_folders_are_kept(tmp_path: Path) -> None:
    mine = tmp_path / f"ckptbench-ranks-{os.getpid()}-abc"
    mine.mkdir()
    other = tmp_path / "ckptbench-notes"  # not a scratch folder name
    other.mkdir()
    assert orphans.reclaim_stale(str(tmp_path)) == []
    assert mine.is_dir() and other.is_dir()
