"""Retries with jittered exponential backoff for GCS requests.

GCS answers 429 when load ramps up faster than it rebalances, and 408/5xx or a dropped
connection now and then; all of those succeed when tried again a little later. Anything else
(403, 404, 400, ...) will not get better by waiting, so it raises at once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import requests

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class GcsError(RuntimeError):
    """A GCS request failed; the message names the operation and the object."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class GcsHttpError(GcsError):
    """A GCS request answered with an HTTP error status."""


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` counts every try, the first one included."""

    attempts: int = 6
    base_delay: float = 0.25
    max_delay: float = 16.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("base_delay and max_delay must be >= 0")

    def delay(self, failures: int, rng: Callable[[], float] = random.random) -> float:
        """Full jitter: uniform in [0, min(max, base * 2**(failures-1))], so that many
        clients that failed together do not come back together."""
        ceiling = min(self.max_delay, self.base_delay * 2.0 ** (failures - 1))
        return ceiling * rng()


DEFAULT_POLICY = RetryPolicy()


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception carries, from our errors or google-api-core's."""
    if isinstance(exc, GcsError):
        return exc.status
    code = getattr(exc, "code", None)  # google.api_core.exceptions.GoogleAPICallError
    if isinstance(code, int):
        return code
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_retryable(exc: BaseException) -> bool:
    status = status_of(exc)
    if status is not None:
        return status in RETRYABLE_STATUS or 500 <= status < 600
    # Network-level failures: the request may not have reached GCS, or its answer was lost.
    return isinstance(
        exc,
        requests.exceptions.ConnectionError
        | requests.exceptions.Timeout
        | requests.exceptions.ChunkedEncodingError
        | ConnectionError
        | TimeoutError,
    )


def call_with_retry(
    fn: Callable[[], T],
    what: str,
    policy: RetryPolicy = DEFAULT_POLICY,
    *,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
) -> T:
    """Call ``fn`` until it succeeds, a non-retryable error occurs, or attempts run out.

    ``what`` names the operation and object (e.g. ``"upload gs://b/x"``) and starts the
    message of the error raised, which chains the last underlying error.
    """
    for attempt in range(1, policy.attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if not is_retryable(exc):
                if isinstance(exc, GcsError):
                    raise
                raise GcsError(f"{what}: {exc}", status_of(exc)) from exc
            if attempt == policy.attempts:
                raise GcsError(
                    f"{what}: gave up after {attempt} attempts: {exc}", status_of(exc)
                ) from exc
            sleep(policy.delay(attempt, rng))
    raise AssertionError("unreachable")  # pragma: no cover
