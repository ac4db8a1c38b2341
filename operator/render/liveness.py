"""The worker container's liveness probe: the rank's heartbeat file, read by the kubelet.

Each rank touches its heartbeat file from a thread of its own
(``workload/rank/process/heartbeat.py``).
A frozen rank (stopped, deadlocked with the interpreter held) stops beating; the kubelet then
kills its container, the pod fails, and the benchmark fails within ``progressTimeoutSeconds``
instead of holding every other rank until the gloo timeout. A rank that waits for a slow peer
or a slow upload keeps beating and is left alone.
"""

from __future__ import annotations

from typing import Any

from ckptbench.operator.spec.names import TMP_PATH
from ckptbench.workload.contract.settings import heartbeat_period

HEARTBEAT_FILE = f"{TMP_PATH}/ckptbench-heartbeat"

# The probe runs in the workload image's Python (the venv is first on PATH). Before the first
# beat (the rank still importing torch) the heartbeat's age is the container's: /proc/1 is the
# worker, whose start bounds how long a rank may take to beat at all.
PROBE_SCRIPT = (
    "import os,sys,time\n"
    "path,limit=sys.argv[1],float(sys.argv[2])\n"
    "try:\n"
    "    age=time.time()-os.stat(path).st_mtime\n"
    "except FileNotFoundError:\n"
    "    age=time.time()-os.stat('/proc/1').st_ctime\n"
    "sys.exit(0 if age<=limit else 1)\n"
)


def liveness_probe(progress_timeout_seconds: float, path: str = HEARTBEAT_FILE) -> dict[str, Any]:
    """A probe that fails once the heartbeat is older than the progress timeout. It checks as
    often as the rank beats, so a freeze is acted on within one beat of the bound."""
    every = max(1, round(heartbeat_period(progress_timeout_seconds)))
    return {
        "exec": {"command": ["python", "-c", PROBE_SCRIPT, path, f"{progress_timeout_seconds:g}"]},
        "periodSeconds": every,
        # The script's age test is the bound; one failed check is the verdict, not a blip.
        "failureThreshold": 1,
        "timeoutSeconds": max(every, 5),
    }
