"""One object uploaded as parts from a stream of writes: what both upload schemes share.

One rank's byte stream is cut into parts uploaded concurrently; how the parts become the object
is the scheme's (:mod:`.upload`: temporary objects composed, :mod:`.multipart`: the XML API's
multipart upload). Memory stays near ``threads x part_size`` whatever the object size, and tensor
payloads are not copied. DCP hands ``torch.save``'s tensor payload over as one memoryview of the
tensor's own storage. When the caller can name an object keeping that memory alive
(``keepalive``: the writer pins the tensors it resolves), the payload's slices are uploaded
holding a reference to it and ``write`` returns at once. Otherwise the slices are still sent
straight from the memory, but ``write`` waits for them, so no reference to unvouched memory
outlives the call. Small writes (zip framing) are gathered into a buffer no larger than a part.
"""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from types import TracebackType
from typing import Any, Required, TypedDict, Unpack

from ckptbench.workload.storage.gcs import crc
from ckptbench.workload.storage.gcs.objects import GcsObjects
from ckptbench.workload.storage.retry import DISCARD_SECONDS

log = logging.getLogger(__name__)

# Writes from this size up are sent without a copy when their memory's owner is known.
ZERO_COPY_MIN_BYTES = 1 << 20


def require_positive(**values: int) -> None:
    """Refuse a thread count or a size below 1, naming it."""
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def smallest_even_part(nbytes: int, size: int) -> int:
    """The smallest of the fewest parts of at most ``size`` that ``nbytes`` splits into evenly
    (they differ by a byte at most)."""
    return nbytes // -(-nbytes // size)


class StreamOptions(TypedDict, total=False):
    """What a part stream is tuned by (:class:`PartedUploadStream`'s constructor says how)."""

    threads: Required[int]
    part_size: Required[int]
    keepalive: Callable[[memoryview], object | None] | None
    expected_bytes: int
    discard_seconds: float


class PartedUploadStream(io.RawIOBase):
    """A write-only stream whose bytes become the object ``name`` when it is closed.

    Close assembles the object (or, if everything fit in one part, uploads it in one request);
    :meth:`abort` discards it. Both leave nothing of the parts behind; after a failure, within
    ``discard_seconds`` (what is left then is the failed sample's cleanup's to remove or report).
    An upload error fails the next ``write`` or ``close``, so a save stops early instead of
    serializing the rest of the shard.

    A scheme supplies :meth:`_may_send_short` (whether a part shorter than ``part_size`` may go
    out now), :attr:`max_parts`, :meth:`_send_part` (run on a worker), :meth:`_assemble` and
    :meth:`_discard`.
    """

    max_parts: int
    # The smallest part the scheme lets go out before the last (0: any size).
    min_short: int = 0

    def __init__(
        self,
        objects: GcsObjects,
        name: str,
        **options: Unpack[StreamOptions],
    ) -> None:
        """``keepalive(view)`` may return an object whose life keeps ``view``'s memory valid
        (e.g. the tensor that owns it); such writes are uploaded without blocking ``write``.
        ``expected_bytes`` (an estimate of the stream's length) sizes the part budget: short
        parts are sent only while full parts for the rest still fit under the limit."""
        super().__init__()
        threads, part_size = options["threads"], options["part_size"]
        discard_seconds = options.get("discard_seconds", DISCARD_SECONDS)
        require_positive(threads=threads, part_size=part_size)
        if not discard_seconds > 0:
            raise ValueError(f"discard_seconds must be > 0, got {discard_seconds}")
        self._discard_seconds = discard_seconds
        self._objects = objects
        self._name = name
        self._part_size = part_size
        # Writes below this size are always copied into the part buffer.
        self._small = min(part_size, ZERO_COPY_MIN_BYTES)
        self._keepalive = options.get("keepalive")
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="gcs-upload")
        # Bounds parts submitted but not finished: the producer waits instead of queueing
        # the whole shard. One more than the workers keeps a part ready for each free thread.
        self._slots = threading.BoundedSemaphore(threads + 1)
        self._buf: bytearray | None = None
        self._fill = 0
        self._pos = 0
        self._expected = options.get("expected_bytes", 0)
        self._sizes: list[int] = []
        self._crcs: list[int | None] = []
        self._shorts = 0
        self._pending: list[Future[None]] = []
        self._error: BaseException | None = None
        self._aborted = False
        self._finished = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def error(self) -> BaseException | None:
        """The first upload failure, if any. Callers such as ``torch.save``'s zip writer may
        replace the exception a failing ``write`` raises with their own; this keeps ours."""
        return self._error

    @property
    def part_sizes(self) -> list[int]:
        """The size of each part sent (or being sent), in order."""
        return list(self._sizes)

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def write(self, b: Any) -> int:
        # torch.save writes each tensor as a few dozen pieces (zip records, padding, the
        # pickle): the ones that only join the part buffer take this short way.
        buf = self._buf
        if buf is not None and self._error is None and not self._finished:
            n = memoryview(b).nbytes
            if n < self._small and self._fill + n < self._part_size:
                buf += b
                self._fill += n
                self._pos += n
                return n
        return self._write(b)

    def _write(self, b: Any) -> int:
        if self._finished:
            raise ValueError(f"write to a finished upload of {self._objects.url(self._name)}")
        self._raise_if_failed()
        mv = memoryview(b).cast("B")
        n = mv.nbytes
        self._pos += n
        size = self._part_size
        owner = None
        if self._keepalive is not None and n >= min(size, ZERO_COPY_MIN_BYTES):
            owner = self._keepalive(mv)
        if self._fill:
            if (owner is not None or n >= size) and self._may_send_short(self._fill):
                # Send the buffered bytes as a short part rather than topping the buffer up
                # from this write: then all of a tensor's payload goes out without a copy, and
                # a tensor smaller than a part is not gathered with its neighbours into one
                # part (which would leave threads idle).
                self._submit_buffer()
            elif owner is not None and self._buffer_joins_payload(n):
                # Too little buffered to go out alone: it becomes the first of this payload's
                # even parts, topped up from it (to at least the smallest part that may go), so
                # the rest of the payload still goes without a copy.
                first = max(self.min_short, smallest_even_part(self._fill + n, size))
                take = first - self._fill
                assert self._buf is not None
                self._buf += mv[:take]
                self._fill += take
                mv = mv[take:]
                self._submit_buffer()
            else:
                # No short part allowed here (or a small write): gather into the buffer.
                mv = self._copy_in(mv)
        if owner is not None:
            tail = self._submit_owned(mv, owner)
        else:
            full = mv.nbytes - mv.nbytes % size
            tail = mv[full:]
            borrowed: list[Future[None]] = []
            try:
                for lo in range(0, full, size):
                    borrowed.append(self._submit(mv[lo : lo + size]))
            finally:
                # These slices point into memory nobody vouched for: none may outlive this
                # call.
                if borrowed:
                    wait(borrowed)
        if tail.nbytes:
            self._copy_in(tail)
        self._raise_if_failed()
        return n

    def _submit_owned(self, mv: memoryview, owner: object) -> memoryview:
        """Memory someone vouched for: its slices go out as they are, each holding a reference
        to the owner, and write returns at once so the uploads overlap the serialization of the
        next tensor. The payload is cut into the fewest even parts of at most ``part_size`` (2.5
        parts' worth as three equal parts, not two whole ones and a short one that would run
        alone after them) when the scheme lets such a part go; otherwise into whole parts, and
        what is left is returned, to be gathered into the buffer."""
        size, n = self._part_size, mv.nbytes
        if not n:
            return mv
        smallest = smallest_even_part(n, size)
        if smallest == size or self._may_send_short(smallest):
            count = -(-n // size)
            for i in range(count):
                self._submit(mv[i * n // count : (i + 1) * n // count], owner)
            if n % size:
                self._shorts += 1  # the budget's one short part for this payload
            return mv[:0]
        full = n - n % size
        for lo in range(0, full, size):
            self._submit(mv[lo : lo + size], owner)
        return mv[full:]

    def _buffer_joins_payload(self, n: int) -> bool:
        """Whether what is buffered, too little to go alone, may go as the first part of an
        ``n``-byte payload, topped up from it."""
        return self._fill < self.min_short < min(
            self._part_size, self._fill + n
        ) and self._may_send_short(self.min_short)

    def _short_budget_allows(self, limit: int, reserved: int) -> bool:
        """Whether one more short part still leaves room, under ``limit`` parts in all (minus
        ``reserved``), for the full parts the rest of the stream needs (counted from what was
        actually written)."""
        stream = max(self._expected, self._pos)
        full_parts = -(-stream // self._part_size)
        return self._shorts + 1 + full_parts + reserved <= limit

    def close(self) -> None:
        if self._finished:
            super().close()
            return
        try:
            self._raise_if_failed()
            if not self._sizes:
                # Everything fit in one part: one simple upload, nothing to assemble.
                data = memoryview(self._buf)[: self._fill] if self._buf is not None else b""
                self._objects.upload(self._name, data)
            else:
                if self._fill:
                    self._submit_buffer()
                self._wait_pending()
                self._assemble()
        except BaseException:
            self._finish(failed=True)
            raise
        self._finish(failed=False)

    def abort(self) -> None:
        """Discard the upload: stop pending parts and remove the uploaded ones."""
        if not self._finished:
            self._aborted = True
            self._finish(failed=True)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    # -- what a scheme supplies ---------------------------------------------------------------

    def _may_send_short(self, nbytes: int) -> bool:
        raise NotImplementedError

    def _before_first_part(self) -> None:
        """Called in the producer before the first part is submitted."""

    def _send_part(self, index: int, data: memoryview) -> int | None:
        """Upload part ``index`` (0-based); its crc32c when checked."""
        raise NotImplementedError

    def _assemble(self) -> None:
        raise NotImplementedError

    def _discard(self, pool: ThreadPoolExecutor, *, failed: bool) -> bool:
        """Remove what the parts left on the server (after a success or a failure), on
        ``pool``'s threads; True when some of that work is still running past the bound."""
        raise NotImplementedError

    # -- internals -----------------------------------------------------------------------

    def _copy_in(self, mv: memoryview) -> memoryview:
        """Append to the part buffer; submit it when full. Returns what did not fit."""
        if self._buf is None:
            # Grown on demand rather than preallocated: a buffer holding a few hundred bytes
            # of zip framing must not pin a whole part of memory.
            self._buf = bytearray()
        take = min(mv.nbytes, self._part_size - self._fill)
        self._buf += mv[:take]
        self._fill += take
        if self._fill == self._part_size:
            self._submit_buffer()
        return mv[take:]

    def _submit_buffer(self) -> None:
        assert self._buf is not None
        buf, fill = self._buf, self._fill
        self._buf, self._fill = None, 0
        if fill < self._part_size:
            self._shorts += 1
        self._submit(memoryview(buf)[:fill])

    def _submit(self, data: memoryview, owner: object | None = None) -> Future[None]:
        if len(self._sizes) >= self.max_parts:
            raise ValueError(
                f"upload of {self._objects.url(self._name)} needs more than {self.max_parts} "
                f"parts of {self._part_size} bytes: use a larger part size"
            )
        if not self._sizes:
            self._before_first_part()
        index = len(self._sizes)
        self._sizes.append(data.nbytes)
        self._crcs.append(None)
        self._slots.acquire()
        try:
            fut = self._pool.submit(self._upload_part, index, data, owner)
        except BaseException:
            self._slots.release()
            raise
        self._pending.append(fut)
        return fut

    def _upload_part(self, index: int, data: memoryview, owner: object | None) -> None:
        # ``owner`` is held (as this call's argument) until the part is sent.
        try:
            if self._error is None and not self._aborted:
                self._crcs[index] = self._send_part(index, data)
        except BaseException as exc:
            if self._error is None:
                self._error = exc
            raise
        finally:
            data.release()
            self._slots.release()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _wait_pending(self) -> None:
        done, _ = wait(self._pending, return_when=FIRST_EXCEPTION)
        for fut in done:
            exc = fut.exception()
            if exc is not None:
                raise exc
        # FIRST_EXCEPTION returned with no failure among the done ones: all are done.
        self._raise_if_failed()

    def _combined_crc(self) -> int | None:
        """The object's crc32c from its parts', when every part was checked."""
        if any(c is None for c in self._crcs):
            return None
        return crc.combine_all(
            (c, n) for c, n in zip(self._crcs, self._sizes, strict=True) if c is not None
        )

    def _finish(self, *, failed: bool) -> None:
        self._finished = True
        for fut in self._pending:
            fut.cancel()
        wait(self._pending)
        self._pending.clear()
        late = self._discard(self._pool, failed=failed)
        # Work still running ends within its policy's deadline; queued work is dropped.
        self._pool.shutdown(wait=not late, cancel_futures=True)
        self._buf = None
        super().close()
        if failed:
            log.debug("upload of %s discarded", self._objects.url(self._name))
