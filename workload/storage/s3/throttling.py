"""The throttling the CRT client under s3torchconnector does not retry: HTTP 429.

The CRT client (s3torchconnector 1.5.0) retries a response by its S3 error code: 503 and
``SlowDown`` are retried, up to ``max_attempts``. An S3-compatible store that throttles with 429
and another code (``TooManyRequests``, or a body that is not S3's XML) gets no retry: the client
fails the whole transfer at once with ``AWS_ERROR_S3_INVALID_RESPONSE_STATUS`` (measured on moto
behind the fault proxy: tests/test_s3_throttling.py). A 429 says "come back later" as plainly as
a 503, so the s3 backend retries those transfers itself (:mod:`ckptbench.workload.storage.dcp`).
The client's error carries the status and the body only in its message, which is read here.
"""

from __future__ import annotations

import re

_STATUS = re.compile(r"response_status: (\d{3})\b")
_CODE = re.compile(r"<Code>([^<]{1,64})</Code>")

# Throttling answered with a status the client does not take as throttling.
UNRETRIED_STATUSES = frozenset({429})


def throttled(exc: BaseException) -> str | None:
    """``"HTTP 429 TooManyRequests"`` when ``exc`` is the CRT client giving up on a 429 (the
    store's error code when its body has one), else None."""
    if not _is_client_error(exc):
        return None
    text = str(exc)
    status = _STATUS.search(text)
    if status is None or int(status[1]) not in UNRETRIED_STATUSES:
        return None
    code = _CODE.search(text)
    return f"HTTP {status[1]}" + (f" {code[1]}" if code else "")


def _is_client_error(exc: BaseException) -> bool:
    """The client's ``S3Exception``, known by its name and package: importing the class would
    import s3torchconnector, which must come after the CRT's log is set up (crt_log.py), and
    the data ranks that use this may not use s3 at all."""
    kind = type(exc)
    return kind.__name__ == "S3Exception" and kind.__module__.startswith("s3torchconnectorclient")
