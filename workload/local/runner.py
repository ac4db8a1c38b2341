"""Start N ranks as local processes, the way a JobSet starts N pods, and supervise them.

Each rank runs the pod's own entry point (``python -m ckptbench.cli worker``) configured only by
environment, and writes its compact result to its own termination-log file. Each rank is the
leader of its own process group, so stopping it also stops anything it started, and a Ctrl-C in
the terminal reaches only the runner, which then stops the ranks in order. When one rank fails,
the others are stopped after a short grace instead of waiting for gloo's collective timeout.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from ckptbench.workload.contract.results.rank import RankResult
from ckptbench.workload.local import orphans
from ckptbench.workload.local.emulator import free_port
from ckptbench.workload.local.outcome import Ranked, RankExit, RanksOutcome
from ckptbench.workload.rank.process import environment, heartbeat

WORKER_COMMAND: tuple[str, ...] = (sys.executable, "-m", "ckptbench.cli", "worker")
# After the first rank fails, the others get this long to end (and report) on their own: a
# failure that hits every rank (a dead bucket, a corrupt checkpoint) is then reported by all.
FAILURE_GRACE_SECONDS = 2.0
# SIGTERM first so a rank can write its result; SIGKILL if it has not ended after this.
KILL_GRACE_SECONDS = 5.0
_TAIL_LINES = 40
_POLL_SECONDS = 0.05
# Lines from ranks other than 0 that are worth showing while the run goes on.
_ERROR_LINE = re.compile(
    r"^(Traceback \(most recent call last\)"
    r"|\w+(Error|Exception)\b"
    r"|\[rank \d+\].*\b(error|failed)\b)",
    re.IGNORECASE,
)


def _rank_result(text: str) -> Any:
    return RankResult.from_termination_message(text)


class _Rank:
    def __init__(
        self, rank: int, proc: subprocess.Popen[bytes], result_file: Path, heartbeat_file: Path
    ) -> None:
        self.rank = rank
        self.proc = proc
        self.result_file = result_file
        self.heartbeat_file = heartbeat_file
        self._mark: tuple[int, int] | None = None
        self.last_progress = time.monotonic()
        self.tail: collections.deque[tuple[str, bool]] = collections.deque(maxlen=_TAIL_LINES)
        self.reader: threading.Thread | None = None
        self.stopped = False
        self.peak_rss_bytes: int | None = None

    def poll(self) -> int | None:
        """Reap with wait4 rather than Popen.poll: it also gives the rank's peak resident memory."""
        if self.proc.returncode is not None:
            return self.proc.returncode
        try:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
        except ChildProcessError:
            return self.proc.poll()
        if pid == 0:
            return None
        # Linux reports ru_maxrss in KiB.
        self.peak_rss_bytes = usage.ru_maxrss * 1024
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        return self.proc.returncode

    def watch_progress(self, now: float) -> float:
        """Seconds since the rank last beat its heartbeat or moved a byte of I/O."""
        mark = (heartbeat.last_beat_ns(self.heartbeat_file), _io_bytes(self.proc.pid))
        if mark != self._mark:
            self._mark = mark
            self.last_progress = now
        return now - self.last_progress

    def signal_group(self, sig: signal.Signals) -> None:
        # The rank leads its own session, so its process-group id is its pid; the group outlives
        # the leader only if it started children, and those must stop too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)


class _Printer:
    """Serialises lines from the reader threads onto one stream."""

    def __init__(
        self, out: IO[str], label: str, watch: Callable[[int, str], None] | None = None
    ) -> None:
        self._out = out
        self._label = label
        self._lock = threading.Lock()
        self.watch = watch  # sees every line of every rank, shown or not

    def line(self, rank: int, text: str) -> None:
        tagged = text if text.startswith("[rank ") else f"[rank {rank}] {text}"
        with self._lock:
            self._out.write(f"{self._label}: {tagged}\n")
            self._out.flush()


def _io_bytes(pid: int) -> int:
    """Bytes the process has read and written through system calls (files, sockets) so far."""
    try:
        text = Path(f"/proc/{pid}/io").read_text()
    except OSError:
        return 0
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return int(fields.get("rchar", 0)) + int(fields.get("wchar", 0))


def _state(pid: int) -> str:
    """What /proc says the process is doing, when that explains a freeze."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    state = stat.rpartition(")")[2].split()[:1]
    return {
        "T": "stopped by a signal",
        "t": "stopped by a debugger",
        "D": "in uninterruptible I/O",
    }.get(state[0] if state else "", "")


def full_result_file(result_file: Path) -> Path:
    """Where the rank writes its full result, beside its termination message (``result_file``)."""
    return result_file.with_suffix(".full.json")


def rank_env(
    config: Ranked,
    rank: int,
    result_file: Path,
    master_port: int,
    base_env: Mapping[str, str],
    extra_env: Mapping[str, str],
) -> dict[str, str]:
    """One rank's environment: the pod's variables, plus what a pod would get from Kubernetes."""
    env = dict(base_env)
    env.update(config.to_env())
    env.update(extra_env)
    env["CKPTBENCH_RANK"] = str(rank)
    env["CKPTBENCH_TERMINATION_LOG"] = str(result_file)
    env["CKPTBENCH_HEARTBEAT_FILE"] = str(result_file.with_suffix(".beat"))
    env["CKPTBENCH_RESULT_FILE"] = str(full_result_file(result_file))
    env["CKPTBENCH_MASTER_ADDR"] = "127.0.0.1"
    env["CKPTBENCH_MASTER_PORT"] = str(master_port)
    # N ranks share this machine's cores: without this each would start one intra-op thread per
    # core and they would fight over them (torchrun makes the same choice).
    cpus = environment.cpu_count()
    env.setdefault("OMP_NUM_THREADS", str(max(1, cpus // config.rank_count)))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_ranks(
    config: Ranked,
    *,
    stop: threading.Event,
    out: IO[str],
    label: str,
    timeout: float,
    extra_env: Mapping[str, str] | None = None,
    base_env: Mapping[str, str] | None = None,
    command: Sequence[str] = WORKER_COMMAND,
    failure_grace: float = FAILURE_GRACE_SECONDS,
    kill_grace: float = KILL_GRACE_SECONDS,
    on_started: Callable[[list[int]], None] | None = None,
    watch: Callable[[int, str], None] | None = None,
    parse: Callable[[str], Any] = _rank_result,
) -> RanksOutcome[Any]:
    """Run ``config.rank_count`` ranks to the end (``world_size``, or ``load_world_size`` when a
    restore is onto more ranks); ``stop`` (set by a signal handler) ends them."""
    if timeout <= 0:
        raise ValueError(f"timeout: must be positive, got {timeout}")
    env_base = os.environ if base_env is None else base_env
    printer = _Printer(out, label, watch)
    started = time.monotonic()
    tmp = orphans.scratch_dir("ranks")
    try:
        port = free_port()
        ranks: list[_Rank] = []
        die_with_runner = orphans.die_with_this_thread()
        try:
            for rank in range(config.rank_count):
                result_file = Path(tmp) / f"rank-{rank}.json"
                env = rank_env(config, rank, result_file, port, env_base, extra_env or {})
                proc = subprocess.Popen(
                    list(command),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    # Killed with the runner, even by SIGKILL, which runs no cleanup of ours.
                    preexec_fn=die_with_runner,
                )
                ranks.append(_Rank(rank, proc, result_file, result_file.with_suffix(".beat")))
            if on_started is not None:
                on_started([r.proc.pid for r in ranks])
            for r in ranks:
                r.reader = threading.Thread(
                    target=_read_lines, args=(r, printer), name=f"rank-{r.rank}-output", daemon=True
                )
                r.reader.start()
            outcome = _supervise(
                ranks, stop, timeout, failure_grace, kill_grace, started,
                config.progress_timeout_seconds, printer,
            )  # fmt: skip
        finally:
            # Whatever happened above (an exception, a second signal), no rank outlives this call.
            _stop_all(ranks, kill_grace)
        for r in ranks:
            if r.reader is not None:
                r.reader.join(timeout=2.0)
            # Rank 0's output was shown live; ranks the runner stopped after another's failure
            # only say they were interrupted, unless nobody failed and the run hung.
            if r.rank != 0 and r.proc.returncode != 0 and (not r.stopped or outcome.timed_out):
                _print_tail(r, printer)
        outcome.results, outcome.unreadable = _read_results(ranks, parse)
        outcome.exits = [
            RankExit(
                rank=r.rank,
                pid=r.proc.pid,
                returncode=r.proc.returncode if r.proc.returncode is not None else -9,
                stopped_by_runner=r.stopped,
                peak_rss_bytes=r.peak_rss_bytes,
            )
            for r in ranks
        ]
        outcome.seconds = time.monotonic() - started
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return outcome


def _supervise(
    ranks: list[_Rank],
    stop: threading.Event,
    timeout: float,
    failure_grace: float,
    kill_grace: float,
    started: float,
    progress_timeout: float,
    printer: _Printer,
) -> RanksOutcome[Any]:
    outcome: RanksOutcome[Any] = RanksOutcome(
        results=[], exits=[], timeout_seconds=timeout, progress_timeout=progress_timeout
    )
    deadline = started + timeout
    terminate_at: float | None = None  # when the survivors get SIGTERM
    kill_at: float | None = None  # when they get SIGKILL
    while True:
        codes = [r.poll() for r in ranks]
        if all(c is not None for c in codes):
            return outcome
        now = time.monotonic()
        if outcome.first_failure is None:
            for r, code in zip(ranks, codes, strict=True):
                if code is not None and code != 0:
                    outcome.first_failure = r.rank
                    terminate_at = now + failure_grace
                    break
        if stop.is_set() and not outcome.interrupted:
            outcome.interrupted = True
            terminate_at = now
        if now >= deadline and not outcome.timed_out and not outcome.interrupted:
            outcome.timed_out = True
            terminate_at = now
        if terminate_at is None:
            for r, code in zip(ranks, codes, strict=True):
                if code is None and r.watch_progress(now) > progress_timeout:
                    outcome.stalled = r.rank
                    state = _state(r.proc.pid)
                    printer.line(
                        r.rank,
                        f"no heartbeat and no I/O for {progress_timeout:g} s"
                        + (f" ({state})" if state else "")
                        + ": the runner stops the run (--progress-timeout)",
                    )
                    terminate_at = now
                    break
        if terminate_at is not None and now >= terminate_at and kill_at is None:
            for r, code in zip(ranks, codes, strict=True):
                if code is None:
                    r.stopped = True
                    r.signal_group(signal.SIGTERM)
            kill_at = now + kill_grace
        if kill_at is not None and now >= kill_at:
            for r in ranks:
                if r.poll() is None:
                    r.signal_group(signal.SIGKILL)
        time.sleep(_POLL_SECONDS)


def _stop_all(ranks: list[_Rank], kill_grace: float) -> None:
    """Terminate, then kill, every rank still running (and its group); reap them all."""
    running = [r for r in ranks if r.poll() is None]
    for r in running:
        r.stopped = True
        r.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + kill_grace
    while running and time.monotonic() < deadline:
        running = [r for r in running if r.poll() is None]
        time.sleep(_POLL_SECONDS)
    for r in running:
        r.signal_group(signal.SIGKILL)
    for r in running:
        while r.poll() is None:
            time.sleep(_POLL_SECONDS)
    # A rank that ended on its own may have left children in its group.
    for r in ranks:
        r.signal_group(signal.SIGKILL)


def _read_lines(r: _Rank, printer: _Printer) -> None:
    stream = r.proc.stdout
    if stream is None:
        return
    for raw in iter(stream.readline, b""):
        text = raw.decode(errors="replace").rstrip()
        if not text:
            continue
        show = r.rank == 0 or bool(_ERROR_LINE.match(text))
        if show:
            printer.line(r.rank, text)
        if printer.watch is not None:
            printer.watch(r.rank, text)
        r.tail.append((text, show))
    stream.close()


def _print_tail(r: _Rank, printer: _Printer) -> None:
    unseen = [text for text, shown in r.tail if not shown]
    if not unseen:
        return
    printer.line(r.rank, f"--- last output of rank {r.rank} ({len(unseen)} lines) ---")
    for text in unseen:
        printer.line(r.rank, text)


def _read_result_text(r: _Rank) -> str:
    """The rank's full result, or its termination message if it wrote no full result (it died
    first). The full result keeps every sample, which a long run's message drops: the figures
    over ranks need them, and the summary the ranks write from their full results has them."""
    full = full_result_file(r.result_file)
    with contextlib.suppress(FileNotFoundError):
        text = full.read_text()
        if text.strip():
            return text
    return r.result_file.read_text()


def _read_results(
    ranks: list[_Rank], parse: Callable[[str], Any]
) -> tuple[list[Any], dict[int, str]]:
    results: list[Any] = []
    unreadable: dict[int, str] = {}
    for r in ranks:
        try:
            text = _read_result_text(r)
        except FileNotFoundError:
            continue
        except OSError as exc:
            unreadable[r.rank] = f"its result file could not be read: {exc}"
            continue
        if not text.strip():
            continue
        try:
            results.append(parse(text))
        except ValidationError as exc:
            unreadable[r.rank] = f"its result is not valid JSON of a rank result: {exc}"[:500]
    return results, unreadable
