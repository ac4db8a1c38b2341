"""A reader that went away (``| head -1``) ends a command quietly, as SIGPIPE would (issue 22).

Found: ``ckptbench sizes --model llama3-8b --world-size 8 --json | head -1`` ended in a
BrokenPipeError traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ckptbench.cli import EXIT_BROKEN_PIPE


@pytest.mark.parametrize(
    "argv",
    [["sizes", "--model", "llama3-8b", "--world-size", "8", "--json"], ["crd"]],
    ids=["sizes", "crd"],
)
def test_a_command_whose_reader_went_away_ends_without_a_traceback(argv: list[str]) -> None:
    # The reader is gone before the first write, so the write fails whatever the timing: how
    # much of its output a pipe buffers before `head` exits depends on the machine.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "ckptbench.cli", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == EXIT_BROKEN_PIPE, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr
