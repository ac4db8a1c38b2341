"""One retry policy for every storage request: what is retried, how long to wait, when to stop.

GCS answers 429 when load ramps up faster than it rebalances, and 408/5xx, a dropped connection
or a body cut short now and then; all of those succeed when tried again a little later. Anything
else (403, 404, 400, ...) will not get better by waiting, so it raises at once. Waits are full
jitter exponential backoff, so that ranks that failed together do not come back together.

Three bounds stop a request that will not succeed: ``attempts``; ``deadline_seconds``, the overall
time one operation (all its attempts and waits) may take; and ``stall_seconds``, the longest a
transfer may go without moving a byte before the attempt is abandoned and retried (the socket
timeout of every request). The final error names the operation and object, the attempts made, the
time spent and the last cause. Each retry is logged as a warning with its cause, so a figure that
includes retries says so on the rank's stderr.
"""

from __future__ import annotations

import http.client
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import requests
import urllib3.exceptions

T = TypeVar("T")

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# Every connect waits at most this long, a little more than a SYN retransmission or two.
CONNECT_SECONDS = 20.0


class GcsError(RuntimeError):
    """A GCS request failed; the message names the operation and the object."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class GcsHttpError(GcsError):
    """A GCS request answered with an HTTP error status."""


class TransientError(GcsError):
    """A failure worth another try that carries no HTTP status (e.g. a checksum mismatch of data
    in flight, or a body shorter than announced)."""


class IntegrityError(GcsError):
    """Stored or received bytes are not the bytes written; the message names the object."""


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` counts every try, the first one included."""

    attempts: int = 8
    base_delay: float = 0.25
    max_delay: float = 16.0
    deadline_seconds: float = 900.0
    stall_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("base_delay and max_delay must be >= 0")
        if not self.deadline_seconds > 0:
            raise ValueError(f"deadline_seconds must be > 0, got {self.deadline_seconds}")
        if not self.stall_seconds > 0:
            raise ValueError(f"stall_seconds must be > 0, got {self.stall_seconds}")

    def delay(self, failures: int, rng: Callable[[], float] = random.random) -> float:
        """Full jitter: uniform in [0, min(max, base * 2**(failures-1))]."""
        ceiling = min(self.max_delay, self.base_delay * 2.0 ** (failures - 1))
        return ceiling * rng()

    def start(self, clock: Callable[[], float] = time.monotonic) -> Operation:
        return Operation(self, clock() + self.deadline_seconds, clock)


DEFAULT_POLICY = RetryPolicy()

# How long one step of a failed sample's cleanup may take on one rank (an aborted upload deleting
# its parts, the deletion of the sample's objects) before the failure is reported with what is
# left. Under the ordinary policy a storage that sits on deletes would hold the failed rank for
# the full request deadline (900 s by default) per object.
DISCARD_SECONDS = 60.0


def discard_policy(seconds: float, stall_seconds: float) -> RetryPolicy:
    """Best-effort deletion after a failure: a few quick attempts, each bounded so that one
    object's deletion takes half of ``seconds`` at most and the whole stays near ``seconds``."""
    return RetryPolicy(
        attempts=3,
        max_delay=1.0,
        stall_seconds=min(stall_seconds, seconds / 4),
        deadline_seconds=seconds / 2,
    )


class Operation:
    """One operation's clock: how long its next attempt may wait on the network."""

    def __init__(self, policy: RetryPolicy, deadline: float, clock: Callable[[], float]) -> None:
        self.policy = policy
        self.deadline = deadline
        self._clock = clock

    def remaining(self) -> float:
        return self.deadline - self._clock()

    def timeout(self) -> tuple[float, float]:
        """``(connect, read)`` seconds for ``requests``: a socket silent for this long (sending or
        receiving) ends the attempt, and no attempt outlives the operation's deadline."""
        left = max(0.01, self.remaining())
        stall = min(self.policy.stall_seconds, left)
        return (min(CONNECT_SECONDS, stall), stall)


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


_NETWORK_ERRORS = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
    # Raised by a streamed body read straight from urllib3: a reset or a body cut short.
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.TimeoutError,
    urllib3.exceptions.NewConnectionError,
    http.client.IncompleteRead,
    http.client.RemoteDisconnected,
    ConnectionError,
    TimeoutError,
)


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, TransientError):
        return True
    status = status_of(exc)
    if status is not None:
        return status in RETRYABLE_STATUS or 500 <= status < 600
    # Network-level failures: the request may not have reached GCS, or its answer was lost.
    return isinstance(exc, _NETWORK_ERRORS)


def call_with_retry(
    fn: Callable[[], T],
    what: str,
    policy: RetryPolicy = DEFAULT_POLICY,
    *,
    operation: Operation | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
) -> T:
    """Call ``fn`` until it succeeds, a non-retryable error occurs, attempts run out, or the
    operation's deadline would pass before the next try.

    ``what`` names the operation and object (e.g. ``"upload gs://b/x"``) and starts the
    message of the error raised, which chains the last underlying error. Pass the ``operation``
    whose :meth:`Operation.timeout` ``fn`` uses, so both share one deadline.
    """
    op = operation or policy.start()
    started = op.remaining()
    for attempt in range(1, policy.attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if not is_retryable(exc):
                if isinstance(exc, GcsError) and not isinstance(exc, TransientError):
                    raise
                raise GcsError(f"{what}: {exc}", status_of(exc)) from exc
            given_up = pause_or_give_up(op, attempt, what, _cause(exc), started, sleep, rng)
            if given_up is not None:
                raise GcsError(given_up, status_of(exc)) from exc
    raise AssertionError("unreachable")  # pragma: no cover


def pause_or_give_up(
    op: Operation,
    tries: int,
    what: str,
    cause: str,
    started: float,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
) -> str | None:
    """After failed try number ``tries`` of ``what`` (for ``cause``): log the retry and sleep
    before the next, returning None; or, when the attempts are spent or the next try would pass
    the operation's deadline, return the message to fail with (the caller raises its own error,
    chaining the cause). ``started`` is ``op.remaining()`` when the operation began."""
    policy = op.policy
    wait = policy.delay(tries, rng)
    out_of_time = op.remaining() - wait <= 0
    if tries >= policy.attempts or out_of_time:
        spent = started - op.remaining()
        why = "deadline reached" if out_of_time else "attempts exhausted"
        return (
            f"{what}: gave up after {tries} attempts in {spent:.1f} s ({why}); last cause: {cause}"
        )
    log.warning(
        "%s: attempt %d of %d failed (%s); retrying in %.2f s",
        what,
        tries,
        policy.attempts,
        cause,
        wait,
    )
    sleep(wait)
    return None


def _cause(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, GcsError) else f"{type(exc).__name__}: {text}"
