"""The retries a storage library makes on its own, counted by cause and reported per operation.

Our own retry policy (:mod:`.retry`) logs each retry as it makes it. The S3 clients retry inside
themselves: the CRT client under s3torchconnector, botocore and s3fs under s3fs. Each tells why
only in its debug log, a line per request, which a benchmark cannot leave on. So each backend
feeds the failed attempts its library reports into one :class:`RetryCauses`, and the rank reports
them once per timed operation as a single warning: a count per cause, a few causes at most,
so that a figure measured through retries says so on the rank's stderr with bounded volume.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Mapping

log = logging.getLogger(__name__)

# A warning names this many causes at most (the most frequent), then how many more there were.
SHOWN_CAUSES = 4


class RetryCauses:
    """Failed request attempts by cause, counted from any thread until drained."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def note(self, cause: str, count: int = 1) -> None:
        with self._lock:
            self._counts[cause] += count

    def drain(self) -> dict[str, int]:
        """What was counted since the last drain; the count starts again from nothing."""
        with self._lock:
            counts = dict(self._counts)
            self._counts.clear()
        return counts


def describe(counts: Mapping[str, int]) -> str:
    """``"3x HTTP 503 SlowDown, 1x connection reset"``: most frequent first, bounded."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{n}x {cause}" for cause, n in ranked[:SHOWN_CAUSES])
    hidden = len(ranked) - SHOWN_CAUSES
    return text + (f" and {hidden} other cause(s)" if hidden > 0 else "")


def report(what: str, client: str, counts: Mapping[str, int]) -> str | None:
    """Log one warning for the failed attempts of ``what`` (e.g. ``"save of s3://b/ckpt_0"``)
    that ``client`` retried by itself; returns the message, or None when there were none."""
    total = sum(counts.values())
    if total == 0:
        return None
    message = (
        f"{what}: {total} request attempt(s) failed and were retried by {client}: "
        f"{describe(counts)}"
    )
    log.warning("%s", message)
    return message
