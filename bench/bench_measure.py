"""Do the figures mean what they say? Each printed beside what it is checked against, in one run.

1. Per-rank I/O on an uneven run: 2 ranks, rank 0 holding twice rank 1's bytes (``file``
   backend, on tmpfs and on the disk). DCP ends its save and load with collectives, so
   barrier-to-barrier seconds are the same on both ranks; each rank's own I/O, timed inside the
   storage layer, must not be: on tmpfs, where a rank's writes cost only its own CPU and memory
   bandwidth, the heavier rank's I/O must be clearly the larger (target: rank 0 / rank 1 >= 1.5).
   On the disk, printed beside it and not judged, the ranks share one device: one rank's fsync
   may also flush the other's data (ext4 commits one journal), which can bring their save I/O
   close together in one run and not in the next.
2. ``file`` backend against raw I/O of the same byte count, cold (``file_vs_raw.py``, in a child
   process): one-rank ckptbench samples, each as ``ckptbench worker`` runs it, alternating with raw
   samples (write + fsync, evict, cold read) of as many bytes. Per-round ratios, their median and
   spread; where DCP's load time goes (its read calls against the rest); the page cache checked
   with ``mincore`` around the loop's own eviction. Targets: save / raw write >= 0.9, load / raw
   cold read >= 0.9, nothing left in the page cache after eviction.
3. ``gcs`` vs ``gcsfs`` on the embedded emulator, gcsfs run as the reference runs it
   (``sync_files=False``) and handicapped as before (``--sync-files``: fsspec files have no
   fileno, so DCP calls ``os.sync()`` per file inside the timed save), interleaved by round.

Run: ``.venv/bin/python bench/bench_measure.py``. Measured with the defaults on a 2-core VM: 5
minutes when quiet (parts 32 s, 95 s, 180 s), 17 while five other sessions loaded it (load average
8-17; part 2 is disk-bound, part 3 CPU-bound); part 2's 1 GiB x 5 rounds and part 3's 3 rounds are
what the figures need. Everything printed also goes to ``--out`` (default ``bench-measure.txt``),
line by line, so a run outlives a lost terminal (SIGHUP is noted and the run goes on). Exit codes:
0 every target met, 1 a target missed, 2 the bench failed (the cause is printed: which step, its
exit code or signal, its last output), 3 stopped by SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import faulthandler
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any

from file_vs_raw import Judged, summarize

from ckptbench.workload.contract.checkpoint import sizes

MIB = 1024**2
TARGET_IMBALANCE = 1.5
HERE = Path(__file__).resolve().parent


class BenchFailure(RuntimeError):
    """A step of the bench failed; the message says which, and why."""


class Stopped(BaseException):
    """SIGINT or SIGTERM arrived."""


class Log:
    """Every line to stdout and to a file, flushed as written; stdout may go away (SIGHUP, a
    closed pipe) and the file keeps going."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: IO[str] = path.open("w", buffering=1)
        self.stdout_ok = True
        self.started = time.monotonic()

    def __call__(self, line: str = "") -> None:
        self.file.write(line + "\n")
        self.file.flush()
        if self.stdout_ok:
            try:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            except OSError:
                self.stdout_ok = False
                self.file.write("(stdout is gone; this file goes on)\n")

    def elapsed(self) -> float:
        return time.monotonic() - self.started


# -- child processes -----------------------------------------------------------------------------

_current: subprocess.Popen[str] | None = None


def child(cmd: Sequence[str], timeout: float, what: str, log: Log | None = None) -> None:
    """Run ``cmd`` in its own process group; raise :class:`BenchFailure` naming ``what``, the exit
    code or signal and the last lines of output when it fails or outlives ``timeout``."""
    global _current
    tail: collections.deque[str] = collections.deque(maxlen=40)
    proc = subprocess.Popen(
        list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    _current = proc
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: tail.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        reader.join(5)
        raise BenchFailure(
            f"{what}: no result after {timeout:.0f} s, stopped. Last output:\n" + "".join(tail)
        ) from None
    finally:
        _current = None
    reader.join(5)
    if proc.returncode != 0:
        code = proc.returncode
        how = f"exit code {code}"
        if code < 0:
            name = signal.Signals(-code).name
            how = f"killed by {name}"
            if -code == signal.SIGKILL:
                how += f" (the OOM killer, most often; MemAvailable now {_available()})"
        raise BenchFailure(f"{what}: {how}. Last output:\n" + "".join(tail))


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _available() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return f"{int(line.split()[1]) / 1024**2:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def ckptbench_run(argv: Sequence[str], out: Path, timeout: float) -> Any:
    cmd = [sys.executable, "-m", "ckptbench.cli", "run", *argv, "--json", str(out),
           "--timeout", str(int(timeout))]  # fmt: skip
    child(cmd, timeout + 30, f"ckptbench run {' '.join(argv)}")
    return json.loads(out.read_text())


def spread(xs: Sequence[float]) -> str:
    return f"median {statistics.median(xs):.3f} (min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)})"


# -- 1. uneven ranks ------------------------------------------------------------------------------


def bench_uneven(
    log: Log, root: Path, shm: Path | None, layer_size: int, samples: int, timeout: float
) -> list[Judged]:
    """On tmpfs (judged: each rank's writes cost its own CPU and memory bandwidth) and on the
    disk beside it (a shared device, where one rank's fsync may flush the other's data too)."""
    out: list[Judged] = []
    places = [("tmpfs", shm), ("disk", root)] if shm is not None else [("disk", root)]
    for where, base in places:
        assert base is not None
        log(f"1. uneven 2-rank run, file backend on {where} ({base}): rank 0 holds 2 tensors, "
            "rank 1 holds 1")  # fmt: skip
        folder = base / f"uneven-{os.getpid()}"
        try:
            doc = ckptbench_run(
                ["--storage", f"file://{folder}", "--world-size", "2", "--padding-size", "3",
                 "--layer-size", str(layer_size), "--samples", str(samples), "--warmup", "1"],
                root / f"uneven-{where}.json", timeout,
            )  # fmt: skip
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        [run] = doc["runs"]
        for op in ("save", "load"):
            s = run[op]
            io = s["rank_io_seconds"]
            plan, overhead = s["planning_mean_seconds"], s["collective_overhead_seconds"]
            log(
                f"   {op}: collective mean {s['mean_seconds']:.3f} s (same on both ranks); "
                f"I/O rank 0 {io[0]:.3f} s, rank 1 {io[1]:.3f} s; planning {plan:.3f} s; "
                f"collective overhead {overhead:.3f} s; slowest rank {s['slowest_rank']}"
            )
            if where == places[0][0]:
                name = f"{op} ({where}): rank 0 I/O / rank 1 I/O"
                out.append(Judged(name, io[0] / io[1], TARGET_IMBALANCE))
    return out


# -- 2. file vs raw, cold --------------------------------------------------------------------------


def bench_file_vs_raw(
    log: Log, root: Path, layer_size: int, tensors: int, rounds: int, timeout: float
) -> list[Judged]:
    shard = sizes.total_bytes(layer_size, tensors)
    log(
        f"2. file backend vs raw I/O, cold: 1 rank, {tensors} tensors of "
        f"{sizes.format_bytes(sizes.tensor_bytes(layer_size))}, "
        f"{sizes.format_bytes(shard)}; a ckptbench warm-up, then raw and ckptbench samples "
        f"alternating, {rounds} ckptbench between {rounds + 1} raw (each: write+fsync, evict, "
        "cold read, delete)"
    )
    folder = root / "file-vs-raw"
    folder.mkdir()
    out = root / "file-vs-raw.json"
    cmd = [sys.executable, str(HERE / "file_vs_raw.py"), "--dir", str(folder),
           "--layer-size", str(layer_size), "--tensors", str(tensors), "--rounds", str(rounds),
           "--json", str(out)]  # fmt: skip
    try:
        child(cmd, timeout, "part 2 (file_vs_raw.py)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return summarize(json.loads(out.read_text()), log)


# -- 3. gcs vs gcsfs, fair and handicapped --------------------------------------------------------


def bench_gcs(
    log: Log, root: Path, layer_size: int, tensors: int, samples: int, rounds: int,
    timeout: float,
) -> None:  # fmt: skip
    log(
        f"3. gcs vs gcsfs on the embedded emulator, 2 ranks, {tensors} tensors of "
        f"{sizes.format_bytes(sizes.tensor_bytes(layer_size))}; {rounds} rounds of "
        "(gcs, gcsfs fair, gcsfs handicapped)"
    )
    common = ["--world-size", "2", "--padding-size", str(tensors), "--layer-size",
              str(layer_size), "--samples", str(samples), "--warmup", "1"]  # fmt: skip
    figures: dict[str, dict[str, list[float]]] = {}
    for i in range(rounds):
        for label, backend, handicapped in (
            ("gcs", "gcs", False),
            ("gcsfs fair", "gcsfs", False),
            ("gcsfs handicapped", "gcsfs", True),
        ):
            extra = ["--sync-files"] if handicapped else []
            doc = ckptbench_run(
                [*common, "--backend", backend, *extra], root / f"g-{i}-{label}.json", timeout
            )
            [run] = doc["runs"]
            if backend == "gcsfs" and run["extra"]["settings"].get("sync_files") != handicapped:
                raise BenchFailure(f"{label}: results record {run['extra']['settings']}")
            got = figures.setdefault(label, {"save": [], "load": []})
            for op in ("save", "load"):
                got[op].append(run[op]["throughput_bytes_per_second"] / MIB)
        log(f"   round {i + 1}/{rounds} done at {log.elapsed():.0f} s")
    for op in ("save", "load"):
        for label, got in figures.items():
            log(f"   {op} {label:<18} MiB/s {spread(got[op])}")
        gcs = figures["gcs"][op]
        for label in ("gcsfs fair", "gcsfs handicapped"):
            ratios = [a / b for a, b in zip(gcs, figures[label][op], strict=True)]
            log(f"   {op} gcs / {label}: {spread(ratios)}")


# -- the run ---------------------------------------------------------------------------------------


def _on_signal(log: Log) -> None:
    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signal.Signals(signum).name)

    def hangup(signum: int, frame: FrameType | None) -> None:
        log.stdout_ok = False  # the terminal is gone; the file is not
        log(f"SIGHUP at {log.elapsed():.0f} s: going on, writing to {log.path} only")

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, hangup)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--layer-size",
        type=int,
        default=16384,
        help="rows of parts 1 and 2's tensors (default 16384: 62.5 MiB a tensor)",
    )
    p.add_argument(
        "--tensors", type=int, default=17, help="tensors of part 2's rank (default 17: 1.04 GiB)"
    )
    p.add_argument("--rounds", type=int, default=5, help="part 2's interleaved rounds")
    p.add_argument("--samples", type=int, default=3, help="samples of each ckptbench run (1, 3)")
    p.add_argument("--gcs-rounds", type=int, default=3, help="part 3's interleaved rounds")
    p.add_argument("--dir", type=Path, help="folder for the file runs (default: a temp folder)")
    p.add_argument("--skip", default="", help="comma list of parts to skip: 1, 2, 3")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("bench-measure.txt"),
        help="where a copy of the output goes (default bench-measure.txt)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=900,
        help="seconds any one step (a ckptbench run, part 2) may take (default 900)",
    )
    return p.parse_args(argv)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    a = parse(argv)
    skip = set(a.skip.split(","))
    log = Log(a.out)
    faulthandler.enable(log.file)
    _on_signal(log)
    log(f"ckptbench measurement bench, {os.cpu_count()} CPUs, MemAvailable {_available()}, "
        f"output also in {a.out.resolve()}. GiB = 1024^3 bytes.")  # fmt: skip
    results: list[Judged] = []
    part = "setup"
    try:
        with tempfile.TemporaryDirectory(prefix="ckptbench-bench-", dir=a.dir) as tmp:
            root = Path(tmp)
            if "1" not in skip:
                part = "part 1"
                shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
                results += bench_uneven(log, root, shm, a.layer_size, a.samples, a.timeout)
                log(f"   (part 1 done at {log.elapsed():.0f} s)")
            if "2" not in skip:
                part = "part 2"
                results += bench_file_vs_raw(
                    log, root, a.layer_size, a.tensors, a.rounds, a.timeout
                )
                log(f"   (part 2 done at {log.elapsed():.0f} s)")
            if "3" not in skip:
                part = "part 3"
                bench_gcs(log, root, a.layer_size // 4, 8, a.samples, a.gcs_rounds, a.timeout)
                log(f"   (part 3 done at {log.elapsed():.0f} s)")
    except Stopped as stop:
        if _current is not None:
            _kill(_current)
        log(f"STOPPED by {stop} during {part} at {log.elapsed():.0f} s")
        return 3
    except BaseException as exc:  # whatever it is: say it, and where
        log(f"FAILED during {part} at {log.elapsed():.0f} s: {type(exc).__name__}: {exc}")
        log(traceback.format_exc().rstrip())
        return 2
    log()
    for judged in results:
        log(judged.line())
    log(f"total {log.elapsed():.0f} s")
    return 0 if all(j.met for j in results) else 1


if __name__ == "__main__":
    sys.exit(main())
