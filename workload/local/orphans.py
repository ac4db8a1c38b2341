"""Nothing outlives the local runner: children die with it, and its scratch folders are reclaimed.

A runner killed with SIGKILL runs no cleanup. Its ranks and the emulator ask the kernel to kill
them when it dies (``PR_SET_PDEATHSIG``), and every scratch folder carries the runner's pid in
its name, so the next run removes the folders of runners that are no longer alive.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_PREFIX = "ckptbench-"
# ckptbench-<what>-<pid>-<random>: the pid is that of the runner that made the folder.
_SCRATCH = re.compile(r"^ckptbench-[a-z]+-(\d+)-")


def die_with_this_thread() -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child get SIGKILL when the calling thread ends.

    The kernel ties the signal to the thread that forked the child, so call it from the thread
    that lives as long as the children should (the runner's main thread). If this process died
    between the fork and the prctl, the child exits at once instead of running orphaned.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl  # looked up here: the child should do as little as possible
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def scratch_dir(what: str) -> str:
    """A new temporary folder named after this process, after reclaiming dead runners' ones."""
    reclaim_stale()
    return tempfile.mkdtemp(prefix=f"{_PREFIX}{what}-{os.getpid()}-")


def reclaim_stale(root: str | None = None) -> list[Path]:
    """Remove scratch folders whose runner is gone; returns the folders removed."""
    base = Path(root or tempfile.gettempdir())
    removed: list[Path] = []
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            m = _SCRATCH.match(entry.name)
            if not m or not entry.is_dir() or _alive(int(m.group(1))):
                continue
            shutil.rmtree(entry, ignore_errors=True)
            if not entry.exists():
                removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    # A zombie is dead for our purpose: it will never clean up.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"
