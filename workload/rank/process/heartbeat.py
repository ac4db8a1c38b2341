"""A rank's heartbeat: a file touched every few seconds by a thread of its own.

The local runner watches it with the rank's I/O counters: a rank that is frozen (SIGSTOP, a
debugger, a thread holding the interpreter) stops both, while one that waits for a slow peer at a
barrier keeps beating. The runner then names the frozen rank within ``progress_timeout_seconds``
instead of waiting for the run's timeout.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from ckptbench.workload.contract.settings import heartbeat_period


def start(path: str | None, progress_timeout_seconds: float) -> threading.Thread | None:
    """Touch ``path`` now and then every :func:`period` seconds until the process ends."""
    if not path:
        return None
    target = Path(path)
    every = heartbeat_period(progress_timeout_seconds)

    def beat() -> None:
        while True:
            try:
                target.touch()
            except OSError:
                return  # the runner's folder is gone: nobody is watching any more
            time.sleep(every)

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    return thread


def last_beat_ns(path: Path) -> int:
    """When ``path`` was last touched (0: never)."""
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0
