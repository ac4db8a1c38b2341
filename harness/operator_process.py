"""`ckptbench operator` as a real process against the kmock cluster, for tests and bench alike."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from harness.kmock_cluster import free_port, write_kubeconfig

DEADLINE = 15.0
DEFAULT_IMAGE = "registry.example/ckptbench-workload:test"
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], deadline: float = DEADLINE) -> T:
    end = time.monotonic() + deadline
    last: T | None = None
    while time.monotonic() < end:
        last = probe()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out after {deadline} s waiting for {what} (last: {last!r})")


class Operator:
    """`ckptbench operator` in a subprocess, pointed at the emulator through a kubeconfig."""

    def __init__(
        self,
        kubeconfig: Path,
        log: Path,
        namespace: str = "default",
        image: str = "",
        extra_args: Sequence[str] = (),
    ) -> None:
        self.extra_args = list(extra_args)
        self.kubeconfig = kubeconfig
        self.log = log
        self.namespace = namespace
        self.image = image or DEFAULT_IMAGE
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        args = [sys.executable, "-m", "ckptbench.cli", "operator", "--namespace", self.namespace]
        args += ["--metrics-port", str(self.metrics_port), "--health-port", str(self.health_port)]
        args += ["--bind-address", "127.0.0.1"]  # tests listen on loopback only
        args += ["--default-image", self.image]
        args += self.extra_args
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for("the operator's /healthz", self._healthy)
        except BaseException:
            # The caller's fixture never gets to stop an operator that did not come up.
            self.stop()
            raise

    def _healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"the operator exited: {self.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text: str = response.read().decode()
            return text

    def stop(self) -> None:
        if self.proc is None:
            return
        stop_process(self.proc)
        self.proc = None


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Ask a server process to end; kill it if it has not within 15 s."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@contextmanager
def running_operator(
    emulator_url: str, folder: Path, namespace: str = "default", extra_args: Sequence[str] = ()
) -> Iterator[Operator]:
    """The operator watching ``namespace`` of the emulator at ``emulator_url``, its kubeconfig
    and log in ``folder``; stopped on leaving, whatever happened."""
    operator = Operator(
        write_kubeconfig(folder / "kubeconfig", emulator_url),
        folder / "operator.log",
        namespace,
        extra_args=extra_args,
    )
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()
