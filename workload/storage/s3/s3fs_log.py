"""The retries under s3fs, taken from the debug records that announce them (written for s3fs
2026.9.0, aiobotocore 3.10.0, botocore 1.43.117).

Two layers retry under s3fs, and each says why only at DEBUG:

- botocore's retry handler (s3fs's clients use its legacy mode), before each retry:
  ``retry needed: matching HTTP status and error code seen: 503, SlowDown``,
  ``retry needed: retryable HTTP status code received: 500``,
  ``retry needed, retryable exception caught: <exception>``;
- s3fs's own loop around each call (and around reading a download's body, which botocore does
  not see): ``Retryable error: <exception>``, and ``Client error (maybe retryable): <error>``,
  which it retries only for SlowDown, "reduce your request rate" and XAmzContentSHA256Mismatch.

:func:`install` lowers those loggers to DEBUG and adds a filter that counts the records announcing
a retry and drops every record below the level the logger had, so nothing more reaches any
handler than before. One resend is not seen: aiohttp sends an idempotent request (a PUT, a GET)
once more, silently, when a reused connection breaks under it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ckptbench.workload.storage.retry_causes import RetryCauses

CLIENT = "s3fs (botocore and s3fs's retries)"
LOGGERS = ("botocore.retryhandler", "s3fs")
# s3fs retries these ClientErrors (s3fs.core._error_wrapper); any other it raises.
S3FS_RETRIED_CODES = ("SlowDown", "reduce your request rate", "XAmzContentSHA256Mismatch")


def _exception_cause(exc: object) -> str:
    text = str(exc)
    name = type(exc).__name__
    if "reset by peer" in text or "ConnectionResetError" in text:
        return f"{name} (connection reset)"
    return name


def cause_of(record: logging.LogRecord) -> str | None:
    """The cause a debug record of botocore's retry handler or s3fs gives for a retry; None for
    any other record."""
    message = record.msg if isinstance(record.msg, str) else ""
    args = record.args if isinstance(record.args, tuple) else ()
    if message.startswith("retry needed: matching HTTP status and error code") and len(args) == 2:
        return f"HTTP {args[0]} {args[1]}"
    if message.startswith("retry needed: retryable HTTP status code") and args:
        return f"HTTP {args[0]}"
    if message.startswith("retry needed, retryable exception caught") and args:
        return _exception_cause(args[0])
    if message.startswith("retry needed: crc32 check failed"):
        return "CRC32 mismatch"
    if message.startswith("Retryable error") and args:
        return _exception_cause(args[0])
    if message.startswith("Client error (maybe retryable)") and args:
        text = str(args[0])
        code = next((c for c in S3FS_RETRIED_CODES if c in text), None)
        return f"s3fs: {code}" if code else None
    return None


class _Tally(logging.Filter):
    def __init__(self, into: RetryCauses, passes: int) -> None:
        super().__init__()
        self.into = into
        self.passes = passes  # the logger's level before: records from it on go through

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.passes:
            return True
        cause = cause_of(record)
        if cause is not None:
            self.into.note(cause)
        return False


def install(into: RetryCauses) -> Callable[[], None]:
    """Count the retries under s3fs into ``into``; returns what undoes it."""
    undo: list[Callable[[], None]] = []
    for name in LOGGERS:
        logger = logging.getLogger(name)
        level = logger.level
        tally = _Tally(into, logger.getEffectiveLevel())
        logger.addFilter(tally)
        logger.setLevel(logging.DEBUG)

        def restore(
            logger: logging.Logger = logger, tally: _Tally = tally, level: int = level
        ) -> None:
            logger.removeFilter(tally)
            logger.setLevel(level)

        undo.append(restore)

    def uninstall() -> None:
        for step in undo:
            step()

    return uninstall
