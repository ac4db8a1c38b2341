"""How often a rank beats its heartbeat: shared by the rank that beats
(``rank/process/heartbeat.py``) and the two that watch it (the local runner, and the kubelet
through the pod's liveness probe)."""

from __future__ import annotations

# Beats per progress timeout: a late beat or two never looks like a freeze.
BEATS_PER_TIMEOUT = 5
MIN_PERIOD_SECONDS = 0.2
MAX_PERIOD_SECONDS = 10.0


def period(progress_timeout_seconds: float) -> float:
    return min(
        MAX_PERIOD_SECONDS, max(MIN_PERIOD_SECONDS, progress_timeout_seconds / BEATS_PER_TIMEOUT)
    )
