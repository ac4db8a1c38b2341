"""The retry helper: what it retries, how long it waits, and when it gives up."""

from __future__ import annotations

import pytest
import requests

from ckptbench.workload.storage.retry import (
    GcsError,
    GcsHttpError,
    RetryPolicy,
    call_with_retry,
    is_retryable,
)


class Flaky:
    """Fails with the given errors in turn, then returns "ok"."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def http(status: int) -> GcsHttpError:
    return GcsHttpError(f"upload gs://b/x: HTTP {status}", status)


def run(fn: Flaky, attempts: int = 5) -> tuple[str, list[float]]:
    sleeps: list[float] = []
    policy = RetryPolicy(attempts=attempts, base_delay=1.0, max_delay=4.0)
    result = call_with_retry(fn, "upload gs://b/x", policy, sleep=sleeps.append, rng=lambda: 1.0)
    return result, sleeps


def test_retries_429_and_503_then_succeeds() -> None:
    fn = Flaky(http(429), http(503), http(500))
    result, sleeps = run(fn)
    assert result == "ok"
    assert fn.calls == 4
    # Exponential and capped: 1, 2, 4 with the jitter pinned at its maximum.
    assert sleeps == [1.0, 2.0, 4.0]


def test_retries_connection_errors_and_408() -> None:
    fn = Flaky(requests.exceptions.ConnectionError("reset"), http(408), ConnectionResetError())
    assert run(fn)[0] == "ok"
    assert fn.calls == 4


def test_gives_up_after_attempts_with_the_last_error() -> None:
    fn = Flaky(http(503), http(503), http(429))
    with pytest.raises(GcsError, match=r"upload gs://b/x: gave up after 3 attempts") as info:
        run(fn, attempts=3)
    assert fn.calls == 3
    assert info.value.status == 429
    assert info.value.__cause__ is not None and "429" in str(info.value.__cause__)


@pytest.mark.parametrize("status", [400, 403, 404, 412])
def test_does_not_retry_client_errors(status: int) -> None:
    fn = Flaky(http(status))
    with pytest.raises(GcsHttpError, match=f"HTTP {status}"):
        run(fn)
    assert fn.calls == 1


def test_foreign_non_retryable_error_is_wrapped_with_the_operation() -> None:
    fn = Flaky(KeyError("boom"))
    with pytest.raises(GcsError, match=r"^upload gs://b/x: 'boom'") as info:
        run(fn)
    assert fn.calls == 1
    assert isinstance(info.value.__cause__, KeyError)


def test_google_api_core_codes_are_classified() -> None:
    from google.api_core import exceptions as gexc

    for status, retryable in [(429, True), (503, True), (500, True), (404, False), (403, False)]:
        exc = gexc.from_http_status(status, "from google-api-core")  # type: ignore[no-untyped-call]
        assert is_retryable(exc) is retryable, status


def test_delay_has_full_jitter_within_the_cap() -> None:
    policy = RetryPolicy(attempts=10, base_delay=0.5, max_delay=3.0)
    assert policy.delay(1, rng=lambda: 0.0) == 0.0
    assert policy.delay(2, rng=lambda: 0.5) == pytest.approx(0.5)
    assert policy.delay(8, rng=lambda: 1.0) == 3.0


def test_policy_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="base_delay"):
        RetryPolicy(base_delay=-1)
