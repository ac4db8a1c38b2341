"""A reader that stops early (``| head -1``) ends a command quietly, as SIGPIPE would (issue 22).

Found: ``ckptbench sizes --model llama3-8b --world-size 8 --json | head -1`` ended in a
BrokenPipeError traceback.
"""

from __future__ import annotations

import subprocess
import sys

from ckptbench.cli import EXIT_BROKEN_PIPE


def test_a_closed_pipe_ends_the_command_without_a_traceback() -> None:
    argv = ["sizes", "--model", "llama3-8b", "--world-size", "8,64,512", "--json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckptbench.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()  # the first line came, then the reader goes away
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == EXIT_BROKEN_PIPE, err
    assert "Traceback" not in err and "BrokenPipeError" not in err
