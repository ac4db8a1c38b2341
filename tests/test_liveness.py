"""A frozen rank in a cluster: the worker container's liveness probe reads the heartbeat file the
rank beats, and fails once it is older than progressTimeoutSeconds."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ckptbench.operator.render import jobset as rendering
from ckptbench.operator.render.liveness import HEARTBEAT_FILE, liveness_probe
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec


def _container(**fields: Any) -> dict[str, Any]:
    spec = CheckpointBenchmarkSpec(world_size=2, checkpoint_path="gs://bucket/x", **fields)
    jobset = rendering.render_jobset(
        "bench", "default", "uid-1", spec, rendering.RenderDefaults(image="ckptbench-workload:1")
    )
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    container: dict[str, Any] = pod["containers"][0]
    return container


def _run_probe(probe: dict[str, Any], path: Path) -> int:
    command = list(probe["exec"]["command"])
    command[0] = sys.executable  # the image's venv python is first on its PATH
    command[3] = str(path)
    return subprocess.run(command, timeout=30, check=False).returncode


def test_the_probe_reads_the_file_the_rank_beats_with_the_specs_bound() -> None:
    container = _container(progress_timeout_seconds=120)
    env = {e["name"]: e.get("value") for e in container["env"]}
    probe = container["livenessProbe"]
    assert env["CKPTBENCH_HEARTBEAT_FILE"] == HEARTBEAT_FILE
    assert probe["exec"]["command"][3:] == [HEARTBEAT_FILE, "120"]
    # The file sits on the pod's writable /tmp volume.
    assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"])
    # Checked as often as the rank beats (every 10 s at most), one failure is the verdict.
    assert (probe["periodSeconds"], probe["failureThreshold"]) == (10, 1)


@pytest.mark.parametrize(("bound", "every"), [(1, 1), (20, 4), (300, 10), (86_400, 10)])
def test_the_probe_checks_as_often_as_the_rank_beats(bound: float, every: int) -> None:
    probe = liveness_probe(bound)
    assert probe["periodSeconds"] == every
    assert probe["timeoutSeconds"] >= 5


def test_a_fresh_heartbeat_passes_and_a_stale_one_fails(tmp_path: Path) -> None:
    beat = tmp_path / "heartbeat"
    beat.touch()
    probe = liveness_probe(60)
    assert _run_probe(probe, beat) == 0
    stale = time.time() - 61
    os.utime(beat, (stale, stale))
    assert _run_probe(probe, beat) == 1
    os.utime(beat, (stale + 2, stale + 2))  # 59 s old: within the bound
    assert _run_probe(probe, beat) == 0


def test_before_the_first_beat_the_containers_age_counts(tmp_path: Path) -> None:
    container_age = time.time() - os.stat("/proc/1").st_ctime
    missing = tmp_path / "not-yet"
    young = liveness_probe(container_age + 3600)
    old = liveness_probe(max(1.0, container_age / 2))
    assert _run_probe(young, missing) == 0
    if container_age > 2:
        assert _run_probe(old, missing) == 1
