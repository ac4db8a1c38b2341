"""A rank's process ends once it has reported, whatever threads are still alive.

After a failure a transfer thread may still be blocked; the interpreter's shutdown would wait for
it (and runs C++ destructors that sometimes abort). :func:`worker.end_rank` ends the process at
once, with its output flushed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import threading
    from ckptbench.workload.rank.worker import end_rank

    blocked = threading.Event()
    threading.Thread(target=blocked.wait).start()  # not a daemon: shutdown would wait for it
    print("reported", flush=False)
    end_rank(3)
    """
)


def test_a_rank_ends_with_its_code_and_output_though_a_thread_is_blocked() -> None:
    # Buffered output, as a pod's is unless told otherwise: it must still come out.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "reported\n"  # flushed before the process ended
