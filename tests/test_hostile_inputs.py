"""Files a careless user or an attacker names: devices, FIFOs, deep or binary JSON, Python tags.

Each is refused with one error line naming the file and the reason, in bounded time and memory;
none gives a traceback (issue 33, items 1 and 5). The commands run as child processes under an
address-space limit, so the code before the bound fails by running out of memory, not the machine.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptbench.workload.contract import inputs
from ckptbench.workload.local.outputs import document
from tests.test_sweep_outputs import _grid

HEAD = "apiVersion: ckptbench.dev/v1alpha1\nkind: CheckpointBenchmark\nmetadata: {name: x}\n"
MEMORY_LIMIT = 3 * 1024**3  # far above what any of these commands needs, far below 19 GB


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _ckptbench(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limited,
    )


@pytest.fixture
def good(tmp_path: Path) -> str:
    path = tmp_path / "good.json"
    document.write_json(path, _grid(), ok=True)
    return str(path)


@pytest.fixture
def fifo(tmp_path: Path) -> str:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return str(path)


@pytest.fixture
def endless_fifo(fifo: str) -> Iterator[str]:
    """A FIFO whose writer never stops (until the reader goes away)."""

    def write() -> None:
        try:
            with open(fifo, "wb") as f:
                while True:
                    f.write(b"[" * 65536)
        except OSError:
            pass  # the reader closed its end: the pipe is broken, as it should be

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    yield fifo
    # A writer still blocked in open() (the reader never came) is released by one reader.
    if thread.is_alive():
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        os.close(fd)
    thread.join(timeout=10)


def _argv(command: str, good: str, hostile: str, tmp_path: Path) -> list[str]:
    return {
        "compare": ["compare", good, hostile],
        "report": ["report", good, hostile, "-o", str(tmp_path / "r.html")],
        "render": ["render", "-f", hostile],
        "run": ["run", "-f", hostile, "--storage", str(tmp_path / "ckpt")],
    }[command]


COMMANDS = ["compare", "report", "render", "run"]


def _refused(done: subprocess.CompletedProcess[str], path: str, reason: str) -> None:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert path in done.stderr and reason in done.stderr, done.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_a_device_without_end_is_read_only_to_the_bound(
    command: str, good: str, tmp_path: Path
) -> None:
    done = _ckptbench(*_argv(command, good, "/dev/zero", tmp_path))
    _refused(done, "/dev/zero", "at most")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_nobody_writes_reads_as_empty_and_does_not_hang(
    command: str, good: str, fifo: str, tmp_path: Path
) -> None:
    done = _ckptbench(*_argv(command, good, fifo, tmp_path))
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert fifo in done.stderr, done.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_that_never_ends_is_read_only_to_the_bound(
    command: str, good: str, endless_fifo: str, tmp_path: Path
) -> None:
    done = _ckptbench(*_argv(command, good, endless_fifo, tmp_path))
    _refused(done, endless_fifo, "at most")


def test_a_pipe_with_a_writer_is_read_to_its_end() -> None:
    read, write = os.pipe()
    os.write(write, b'{"runs": []}')
    os.close(write)
    try:
        assert inputs.read_bounded(f"/proc/self/fd/{read}", 100, "a test pipe") == b'{"runs": []}'
    finally:
        os.close(read)


HOSTILE_JSON = {
    "a 100,000-deep array": (b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
    "a 100,000-digit integer": (b'{"runs": [' + b"7" * 100_000 + b"]}", "digits"),
    "binary bytes": (bytes(range(256)) * 4, "not UTF-8"),
}


@pytest.mark.parametrize("case", list(HOSTILE_JSON))
@pytest.mark.parametrize("command", ["compare", "report"])
def test_hostile_json_is_refused_by_name(
    command: str, case: str, good: str, tmp_path: Path
) -> None:
    data, reason = HOSTILE_JSON[case]
    path = tmp_path / "hostile.json"
    path.write_bytes(data)
    done = _ckptbench(*_argv(command, good, str(path), tmp_path))
    _refused(done, str(path), reason)


def test_run_f_refuses_a_python_tag_as_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bench.yaml"
    path.write_text(HEAD + "spec: !!python/object:os.system {}\n")
    done = _ckptbench(*_argv("run", "", str(path), tmp_path))
    _refused(done, str(path), "not valid YAML")
    assert not (tmp_path / "ckpt").exists()


def test_run_f_refuses_binary_bytes(tmp_path: Path) -> None:
    path = tmp_path / "bench.yaml"
    path.write_bytes(HEAD.encode() + b"spec: \xff\xfe\n")
    done = _ckptbench(*_argv("run", "", str(path), tmp_path))
    _refused(done, str(path), "not UTF-8")
