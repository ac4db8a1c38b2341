"""A rank that stops making progress is named and the run fails within --progress-timeout
(issue 21).

Found: a SIGSTOPped rank kept the run going (its frozen upload held the emulator's lock); the only
bound was --timeout, 3600 s by default.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ckptbench.workload.contract.choices import Backend
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.settings import heartbeat_period
from ckptbench.workload.local.outcome import RanksOutcome
from ckptbench.workload.local.runner import run_ranks
from tests import workers

# A rank that lives but does nothing (no I/O) for 4 s, beating its heartbeat or not.
_IDLE = """
import os, sys, time
if sys.argv[1] == "beat":
    from ckptbench.workload.rank.process import heartbeat
    heartbeat.start(os.environ["CKPTBENCH_HEARTBEAT_FILE"], 1.0)
time.sleep(4)
"""


class _Lines:
    def __init__(self) -> None:
        self.text: list[str] = []

    def write(self, s: str) -> int:
        self.text.append(s)
        return len(s)

    def flush(self) -> None:
        pass


def _idle(mode: str) -> tuple[RanksOutcome[Any], float, str]:
    config = WorkloadConfig(
        world_size=2, padding_size=2, layer_size=1, backend=Backend.FILE,
        checkpoint_path="/nonexistent", progress_timeout_seconds=1.5,
    )  # fmt: skip
    out = _Lines()
    t0 = time.monotonic()
    outcome = run_ranks(
        config, stop=threading.Event(), out=out, label="t", timeout=60.0,  # type: ignore[arg-type]
        command=[sys.executable, "-c", _IDLE, mode], kill_grace=2.0,
    )  # fmt: skip
    return outcome, time.monotonic() - t0, "".join(out.text)


def test_a_rank_that_waits_but_beats_its_heartbeat_is_not_taken_for_frozen() -> None:
    outcome, _, out = _idle("beat")
    assert outcome.stalled is None, out
    assert outcome.all_exited_zero


def test_a_rank_with_neither_heartbeat_nor_io_is_named_within_the_bound() -> None:
    outcome, seconds, out = _idle("still")
    assert outcome.stalled in (0, 1), out
    assert seconds < 4  # stopped at 1.5 s without progress, not at the rank's own end
    assert "no heartbeat and no I/O for 1.5 s" in out
    why = outcome.missing_why()
    stalled = str(outcome.stalled)
    assert "stopped by the runner: no heartbeat and no I/O for 1.5 s" in why[stalled]


def test_the_heartbeat_period_is_a_fifth_of_the_timeout_within_bounds() -> None:
    assert heartbeat_period(300) == 10.0
    assert heartbeat_period(10) == 2.0
    assert heartbeat_period(0.5) == 0.2


def _rank_pids(runner: int) -> dict[int, int]:
    """The runner's rank processes, by rank (read from their environment)."""
    found: dict[int, int] = {}
    for pid in workers.children_by_parent().get(runner, []):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in env:
            if item.startswith(b"CKPTBENCH_RANK="):
                found[int(item.split(b"=", 1)[1])] = pid
    return found


def _descendants(root: int) -> set[int]:
    children = workers.children_by_parent()
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.timeout(180)
def test_a_sigstopped_rank_fails_the_run_within_the_bound_and_everything_stops() -> None:
    argv = ["--layer-size", "200", "--padding-size", "4", "--samples", "400", "--warmup", "0",
            "--progress-timeout", "3", "--timeout", "600"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckptbench.cli", "run", *argv],
        cwd=workers.ROOT, env=workers.base_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # until the ranks save and load
            line = proc.stderr.readline()
            seen.append(line)
            if " save 2/" in line or not line:
                break
        assert proc.poll() is None, "".join(seen)
        ranks = _rank_pids(proc.pid)
        assert sorted(ranks) == [0, 1], ranks
        family = _descendants(proc.pid)
        os.kill(ranks[1], signal.SIGSTOP)
        frozen_at = time.monotonic()
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - frozen_at
        assert proc.returncode == 1, err
        # 3 s without progress, then SIGTERM and SIGKILL after the runner's 5 s grace.
        assert took < 3 + 5 + 10, took
        assert "[rank 1] no heartbeat and no I/O for 3 s (stopped by a signal)" in err, err
        assert not [p for p in family if _alive(p)]  # both ranks and the emulator
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.timeout(120)
def test_real_ranks_waiting_for_a_slow_peer_are_not_taken_for_frozen(tmp_path: Path) -> None:
    # Rank 1 spends 4 s in each save (a sleep: no I/O) and rank 0 waits for it at DCP's
    # collectives (no I/O either): only their heartbeats say they live.
    config = workers.small_config(
        str(tmp_path / "ckpt"), sample_count=1, warmup_samples=0, progress_timeout_seconds=1.5
    )
    out = _Lines()
    outcome = run_ranks(
        config, stop=threading.Event(), out=out, label="t", timeout=100.0,  # type: ignore[arg-type]
        command=[sys.executable, "-m", "tests.workers", "slow-write", "1", "4"],
        base_env=workers.base_env(),
    )  # fmt: skip
    text = "".join(out.text)
    assert outcome.stalled is None, text
    assert outcome.all_exited_zero, text
    assert sorted(r.rank for r in outcome.results) == [0, 1]
