"""The CRT client's retries, read from the log s3torchconnector can write (written for 1.5.0).

The CRT client under the s3 backend retries 503 SlowDown, 5xx and broken connections by itself
and tells Python nothing. s3torchconnectorclient writes the client's own log when
``S3_TORCH_CONNECTOR_DEBUG_LOGS`` holds a tracing filter, into hourly files
(``s3torchconnectorclient.log.YYYY-MM-DD-HH``) in ``S3_TORCH_CONNECTOR_LOGS_DIR_PATH``; it reads
both when it is imported, so :func:`start` must run before anything imports it. The CRT logs each
failed attempt it is about to retry, one line each, under the target ``awscrt::S3MetaRequest``::

    ERROR awscrt::S3MetaRequest: id=0x... Request failed from error 14342 (Response code
    indicates throttling). (request=0x..., response status=503). Try to setup a retry.

The filter :data:`FILTER` lets exactly those lines through (in 1.5.0 ``=error`` lets none: the
CRT's levels reach tracing one step apart, as measured), so the file grows by a line per failed
attempt and nothing else. :class:`CrtRetryLog` reads what was added since it last looked and
counts each line's cause into a :class:`~ckptbench.workload.storage.retry_causes.RetryCauses`.
A user's own ``S3_TORCH_CONNECTOR_DEBUG_LOGS`` is left alone: with a log folder it is read
likewise (whatever their filter lets through), without one the retries go to their stdout.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

from ckptbench.workload.storage.retry_causes import RetryCauses

log = logging.getLogger(__name__)

DEBUG_LOGS = "S3_TORCH_CONNECTOR_DEBUG_LOGS"
LOGS_DIR = "S3_TORCH_CONNECTOR_LOGS_DIR_PATH"
FILTER = "awscrt::S3MetaRequest=warn"
FILE_PREFIX = "s3torchconnectorclient.log"
CLIENT = "the CRT client (s3torchconnector)"

_RETRY = re.compile(
    r"Request failed from error (?P<code>\d+) \((?P<text>.*?)\)\. "
    r"\(request=\S+, response status=(?P<status>\d+)\)\. Try to setup a retry"
)


def cause_of(line: str) -> str | None:
    """``"HTTP 503: Response code indicates throttling"`` or ``"socket is closed"`` (no answer),
    for a line of the CRT's log that announces a retry; None for any other line."""
    found = _RETRY.search(line)
    if found is None:
        return None
    text = found["text"].rstrip(".") or f"CRT error {found['code']}"
    status = int(found["status"])
    return f"HTTP {status}: {text}" if status else text


class CrtRetryLog:
    """The CRT log's folder, read from where it was left each time; ``owned`` folders (made by
    :func:`start`) are removed by :meth:`close`, and the variables that named them with it (a
    process started later must not inherit a folder that is gone)."""

    def __init__(
        self,
        directory: Path,
        *,
        owned: bool,
        environ: MutableMapping[str, str] | None = None,
    ) -> None:
        self.directory = directory
        self.owned = owned
        self._environ = environ
        self._offsets: dict[str, int] = {}
        if not owned:  # a user's folder: what is in it already is not this run's
            for path in self._files():
                self._offsets[path.name] = path.stat().st_size

    def _files(self) -> list[Path]:
        try:
            return sorted(p for p in self.directory.iterdir() if p.name.startswith(FILE_PREFIX))
        except OSError:
            return []

    def collect(self, into: RetryCauses) -> None:
        """Count the causes of the retry lines added since the last call (whole lines only: the
        client's writer thread may be half-way through one)."""
        for path in self._files():
            start = self._offsets.get(path.name, 0)
            try:
                with path.open("rb") as f:
                    f.seek(start)
                    added = f.read()
            except OSError:
                continue
            complete = added[: added.rfind(b"\n") + 1]
            self._offsets[path.name] = start + len(complete)
            for line in complete.decode(errors="replace").splitlines():
                cause = cause_of(line)
                if cause is not None:
                    into.note(cause)

    def close(self) -> None:
        if not self.owned:
            return
        shutil.rmtree(self.directory, ignore_errors=True)
        if self._environ is not None and self._environ.get(LOGS_DIR) == str(self.directory):
            self._environ.pop(LOGS_DIR, None)
            if self._environ.get(DEBUG_LOGS) == FILTER:
                self._environ.pop(DEBUG_LOGS, None)


def start(
    environ: MutableMapping[str, str] | None = None, *, imported: bool | None = None
) -> CrtRetryLog | None:
    """Have s3torchconnectorclient log its retries to a private folder of this process (its
    children, DCP's checkpointer process among them, inherit it); None when that cannot be: the
    library is imported already, or the user's own filter writes to stdout."""
    env = os.environ if environ is None else environ
    if imported is None:
        imported = "s3torchconnectorclient" in sys.modules
    if env.get(DEBUG_LOGS):
        if env.get(LOGS_DIR):
            return CrtRetryLog(Path(env[LOGS_DIR]), owned=False)
        log.info(
            "%s is set without %s: the CRT's retries are in its own output", DEBUG_LOGS, LOGS_DIR
        )
        return None
    if imported:
        log.info("s3torchconnector was imported before its log was set up: retries not counted")
        return None
    try:
        directory = Path(tempfile.mkdtemp(prefix="ckptbench-crt-log-"))
    except OSError as exc:
        log.info("no folder for the CRT's log (%s): retries not counted", exc)
        return None
    env[DEBUG_LOGS] = FILTER
    env[LOGS_DIR] = str(directory)
    return CrtRetryLog(directory, owned=True, environ=env)
