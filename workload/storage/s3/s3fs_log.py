"""The retries under s3fs, counted by cause (written for s3fs 2026.9.0, aiobotocore 3.10.0,
botocore 1.43.117).

Two layers retry under s3fs, and each says why only at DEBUG, without the S3 error code:

- botocore's retry handler (s3fs's clients use its legacy mode). Every attempt's outcome goes
  through the client's ``needs-retry`` event, a public hook of botocore: :func:`watch_client`
  counts each failed attempt there, with the status and S3 error code (``HTTP 503 SlowDown``) or
  the exception;
- s3fs's own loop around each call (and around reading a download's body, which botocore does
  not see) logs ``Retryable error: <exception>``, and ``Client error (maybe retryable): <error>``,
  which it retries only for SlowDown, "reduce your request rate" and XAmzContentSHA256Mismatch.
  :func:`install` lowers s3fs's logger to DEBUG and adds a filter that counts the records
  announcing a retry and drops every record below the level the logger had, so nothing more
  reaches any handler than before.

One resend is not seen: aiohttp sends an idempotent request (a PUT, a GET) once more, silently,
when a reused connection breaks under it; it logs nothing and offers no hook for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ckptbench.workload.storage.retry_causes import RetryCauses

CLIENT = "s3fs (botocore and s3fs's retries)"
LOGGER = "s3fs"  # s3fs.core logs its retries here
# s3fs retries these ClientErrors (s3fs.core._error_wrapper); any other it raises.
S3FS_RETRIED_CODES = ("SlowDown", "reduce your request rate", "XAmzContentSHA256Mismatch")


def _exception_cause(exc: object) -> str:
    text = str(exc)
    name = type(exc).__name__
    if "reset by peer" in text or "ConnectionResetError" in text:
        return f"{name} (connection reset)"
    return name


def attempt_cause(response: Any, caught_exception: BaseException | None) -> str | None:
    """Why an attempt failed, from botocore's ``needs-retry`` event (``response`` is the HTTP
    response and the parsed answer); None for an answer botocore does not retry (2xx, 404 ...)."""
    if caught_exception is not None:
        return _exception_cause(caught_exception)
    if not isinstance(response, tuple) or len(response) != 2:
        return None
    http, parsed = response
    status = getattr(http, "status_code", None)
    error = parsed.get("Error", {}) if isinstance(parsed, dict) else {}
    code = error.get("Code", "") if isinstance(error, dict) else ""
    if not isinstance(status, int) or not (status >= 500 or status == 429 or code in THROTTLED):
        return None
    # A HEAD's answer has no body: botocore then puts the status where the code goes.
    return f"HTTP {status}" if code in ("", str(status)) else f"HTTP {status} {code}"


# 4xx answers botocore's legacy mode retries (its _retry.json), beside every 5xx and 429.
THROTTLED = frozenset(
    {"Throttling", "ThrottlingException", "RequestLimitExceeded", "RequestThrottled",
     "ProvisionedThroughputExceededException", "RequestTimeout", "RequestTimeoutException",
     "PriorRequestNotComplete", "SlowDown"}
)  # fmt: skip


def watch_client(client: Any, into: RetryCauses) -> None:
    """Count each failed attempt of ``client`` (s3fs's aiobotocore S3 client) into ``into``."""

    def needs_retry(
        response: Any = None, caught_exception: BaseException | None = None, **_: Any
    ) -> None:
        cause = attempt_cause(response, caught_exception)
        if cause is not None:
            into.note(cause)
        # None: botocore's own handler decides whether to retry, as before.

    client.meta.events.register("needs-retry.s3", needs_retry, unique_id="ckptbench-retries")


def cause_of(record: logging.LogRecord) -> str | None:
    """The cause a debug record of s3fs gives for a retry; None for any other record."""
    message = record.msg if isinstance(record.msg, str) else ""
    args = record.args if isinstance(record.args, tuple) else ()
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
    logger = logging.getLogger(LOGGER)
    level = logger.level
    tally = _Tally(into, logger.getEffectiveLevel())
    logger.addFilter(tally)
    logger.setLevel(logging.DEBUG)

    def uninstall() -> None:
        logger.removeFilter(tally)
        logger.setLevel(level)

    return uninstall
