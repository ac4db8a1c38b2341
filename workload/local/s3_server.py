"""An embedded S3 server (moto's) for runs and tests with no endpoint and no credentials.

moto's server speaks the S3 API, multipart uploads included, and keeps objects in its own memory;
it runs as a process of its own (``python -m moto.server``) on 127.0.0.1 and a free port, killed
with its starter, so ranks measure their own client against a server that no rank's interpreter
shares.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
from typing import IO, Any

from ckptbench.workload.local import orphans
from ckptbench.workload.local.emulator import free_port, wait_answering

# moto accepts any key pair; these say what they are in a log.
ACCESS_KEY = "ckptbench-embedded"
SECRET_KEY = "ckptbench-embedded-secret"
REGION = "us-east-1"


class S3Server:
    """moto's S3 server on 127.0.0.1 and a free port; use as a context manager."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def env(self) -> dict[str, str]:
        """The variables that send every AWS client (the CRT's, boto3's, s3fs's) here."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            # Temporary credentials of the caller's would sign with a token moto never issued.
            "AWS_SESSION_TOKEN": "",
        }

    def start(self, timeout: float = 30.0) -> S3Server:
        self.port = free_port(self.host)
        # A file, not a pipe: moto logs every request, and a full pipe would stall the server.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - open until stop()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Killed with its starter, even by SIGKILL: no server left holding old objects.
            preexec_fn=orphans.die_with_this_thread(),
        )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        assert self._proc is not None
        wait_answering(
            self._proc,
            self.url,
            "/moto-api/",
            timeout,
            "moto's S3 server",
            self._log_tail,
            self.stop,
        )

    def create_bucket(self, name: str) -> None:
        """Create a bucket; one that already exists counts as success."""
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=name)

    def _log_tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read()[-2000:].decode(errors="replace")

    def client(self) -> Any:
        import boto3

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> S3Server:
        return self.start() if not self.running else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
