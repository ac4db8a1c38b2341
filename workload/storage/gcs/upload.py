"""Parallel composite upload of one object from a stream of writes.

No GCS emulator implements the XML multipart upload, but all implement compose, so one rank's
byte stream is cut into parts uploaded concurrently as temporary objects, then composed into the
final object (hierarchically: one compose takes at most 32 sources), and the parts deleted.

Memory stays near ``threads x part_size`` whatever the object size, and tensor payloads are
not copied. DCP hands ``torch.save``'s tensor payload over as one memoryview of the tensor's own
storage. When the caller can name an object keeping that memory alive (``keepalive``: the
writer pins the tensors it resolves), the payload's slices are uploaded holding a reference to
it and ``write`` returns at once. Otherwise the slices are still sent straight from the memory,
but ``write`` waits for them, so no reference to unvouched memory outlives the call. Small
writes (zip framing) are gathered into a buffer no larger than a part.
"""

from __future__ import annotations

import io
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from types import TracebackType
from typing import Any

from ckptbench.workload.storage.gcs import crc
from ckptbench.workload.storage.gcs.objects import GcsObjects
from ckptbench.workload.storage.retry import DISCARD_SECONDS, discard_policy

log = logging.getLogger(__name__)

COMPOSE_MAX_SOURCES = 32
# A composite object may have at most this many components in all.
MAX_COMPONENTS = 1024
# Components kept free for the last, short part (the buffer flushed at close).
RESERVED_COMPONENTS = 2
# Writes from this size up are sent without a copy when their memory's owner is known.
ZERO_COPY_MIN_BYTES = 1 << 20


def require_positive(**values: int) -> None:
    """Refuse a thread count or a size below 1, naming it."""
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def parts_prefix(name: str) -> str:
    """Temporary parts live beside the object, under a name unique to this upload, so two
    uploads never write the same part name (GCS throttles rewriting one name)."""
    return f"{name}.parts/{uuid.uuid4().hex}-"


def first_level_groups(sizes: Sequence[int]) -> list[tuple[int, int]] | None:
    """Runs [lo, hi) of consecutive parts to compose first so that at most 32 remain, chosen
    to re-compose as few bytes as possible (real GCS composes without copying, but emulators
    copy every source byte): repeatedly merge the adjacent pair of runs with the smallest
    total size. None when no merge is needed or this greedy choice cannot reach 32."""
    if len(sizes) <= COMPOSE_MAX_SOURCES:
        return None
    runs = [(i, i + 1, sizes[i]) for i in range(len(sizes))]
    while len(runs) > COMPOSE_MAX_SOURCES:
        best = None
        for k in range(len(runs) - 1):
            (lo, _, a), (_, hi, b) = runs[k], runs[k + 1]
            if hi - lo <= COMPOSE_MAX_SOURCES and (best is None or a + b < best[1]):
                best = (k, a + b)
        if best is None:
            return None
        k = best[0]
        runs[k : k + 2] = [(runs[k][0], runs[k + 1][1], best[1])]
    return [(lo, hi) for lo, hi, _ in runs]


class CompositeUploadStream(io.RawIOBase):
    """A write-only stream whose bytes become the object ``name`` when it is closed.

    Close composes the object (or, if everything fit in one part, uploads it in one request);
    :meth:`abort` discards it. Both delete the temporary parts; after a failure, within
    ``discard_seconds`` (what is left then is the failed sample's cleanup's to remove or report).
    An upload error fails the next ``write`` or ``close``, so a save stops early instead of
    serializing the rest of the shard.
    """

    def __init__(
        self,
        objects: GcsObjects,
        name: str,
        *,
        threads: int,
        part_size: int,
        keepalive: Callable[[memoryview], object | None] | None = None,
        expected_bytes: int = 0,
        discard_seconds: float = DISCARD_SECONDS,
    ) -> None:
        """``keepalive(view)`` may return an object whose life keeps ``view``'s memory valid
        (e.g. the tensor that owns it); such writes are uploaded without blocking ``write``.
        ``expected_bytes`` (an estimate of the stream's length) sizes the component budget:
        short parts are sent only while full parts for the rest still fit under the limit."""
        super().__init__()
        require_positive(threads=threads, part_size=part_size)
        if not discard_seconds > 0:
            raise ValueError(f"discard_seconds must be > 0, got {discard_seconds}")
        self._discard_seconds = discard_seconds
        self._objects = objects
        self._name = name
        self._part_size = part_size
        # Writes below this size are always copied into the part buffer.
        self._small = min(part_size, ZERO_COPY_MIN_BYTES)
        self._keepalive = keepalive
        self._prefix = parts_prefix(name)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="gcs-upload")
        # Bounds parts submitted but not finished: the producer waits instead of queueing
        # the whole shard. One more than the workers keeps a part ready for each free thread.
        self._slots = threading.BoundedSemaphore(threads + 1)
        self._buf: bytearray | None = None
        self._fill = 0
        self._pos = 0
        self._expected = expected_bytes
        self._parts: list[str] = []
        self._sizes: list[int] = []
        self._crcs: list[int | None] = []
        self._shorts = 0
        self._temps: list[str] = []
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
            if (owner is not None or n >= size) and self._may_add_short():
                # Send the buffered bytes as a short part rather than topping the buffer up
                # from this write: then all of a tensor's payload goes out without a copy, and
                # a tensor smaller than a part is not gathered with its neighbours into one
                # part (which would leave threads idle). Compose accepts parts of any size.
                self._submit_buffer()
            else:
                # Out of short parts (or a small write): gather into the buffer.
                mv = self._copy_in(mv)
        full = mv.nbytes - mv.nbytes % size
        tail = mv[full:]
        if owner is not None:
            # Memory someone vouched for: every slice goes out as is, each holding a
            # reference to the owner, and write returns at once so the uploads overlap the
            # serialization of the next tensor.
            for lo in range(0, full, size):
                self._submit(mv[lo : lo + size], owner)
            if tail.nbytes and self._may_add_short():
                self._submit(tail, owner)
                self._shorts += 1
                tail = tail[:0]
        else:
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

    def _may_add_short(self) -> bool:
        """Whether one more short part still leaves room, under the component limit, for the
        full parts the rest of the stream needs (counted from what was actually written)."""
        stream = max(self._expected, self._pos)
        full_parts = -(-stream // self._part_size)
        return self._shorts + 1 + full_parts + RESERVED_COMPONENTS <= MAX_COMPONENTS

    def close(self) -> None:
        if self._finished:
            super().close()
            return
        try:
            self._raise_if_failed()
            if not self._parts:
                # Everything fit in one part: one simple upload, no compose.
                data = memoryview(self._buf)[: self._fill] if self._buf is not None else b""
                self._objects.upload(self._name, data)
            else:
                if self._fill:
                    self._submit_buffer()
                self._wait_pending()
                self._compose(self._parts)
        except BaseException:
            self._finish(failed=True)
            raise
        self._finish(failed=False)

    def abort(self) -> None:
        """Discard the upload: stop pending parts and delete the uploaded ones."""
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
        name = f"{self._prefix}{len(self._parts):05d}"
        if len(self._parts) >= MAX_COMPONENTS:
            raise ValueError(
                f"upload of {self._objects.url(self._name)} needs more than {MAX_COMPONENTS} "
                f"parts of {self._part_size} bytes: use a larger part size"
            )
        index = len(self._parts)
        self._parts.append(name)
        self._sizes.append(data.nbytes)
        self._crcs.append(None)
        self._slots.acquire()
        try:
            fut = self._pool.submit(self._upload_part, index, name, data, owner)
        except BaseException:
            self._slots.release()
            raise
        self._pending.append(fut)
        return fut

    def _upload_part(self, index: int, name: str, data: memoryview, owner: object | None) -> None:
        # ``owner`` is held (as this call's argument) until the part is sent.
        try:
            if self._error is None and not self._aborted:
                self._crcs[index] = self._objects.upload(name, data)
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

    def _compose(self, sources: Sequence[str]) -> None:
        groups = first_level_groups(self._sizes)
        if groups is not None:
            # One cheap level: merge only the runs chosen by size, pass the rest through.
            merged: list[str] = []
            tasks: list[Callable[[], None]] = []
            for j, (lo, hi) in enumerate(groups):
                if hi - lo == 1:
                    merged.append(sources[lo])
                    continue
                dest = f"{self._prefix}m-{j:05d}"
                self._temps.append(dest)
                tasks.append(_bind_compose(self._objects, dest, sources[lo:hi]))
                merged.append(dest)
            self._run_all(tasks)
            sources = merged
        level = 0
        while len(sources) > COMPOSE_MAX_SOURCES:
            chunks = [
                sources[i : i + COMPOSE_MAX_SOURCES]
                for i in range(0, len(sources), COMPOSE_MAX_SOURCES)
            ]
            names = [f"{self._prefix}c{level}-{j:05d}" for j in range(len(chunks))]
            self._temps.extend(names)
            self._run_all(
                [
                    _bind_compose(self._objects, dest, chunk)
                    for dest, chunk in zip(names, chunks, strict=True)
                ]
            )
            sources = names
            level += 1
        expected = None
        if all(c is not None for c in self._crcs):
            # The parts were each checked on arrival; the object must be exactly them in order.
            expected = crc.combine_all(
                (c, n) for c, n in zip(self._crcs, self._sizes, strict=True) if c is not None
            )
        self._objects.compose(self._name, sources, expected_crc=expected)

    def _run_all(self, tasks: list[Callable[[], None]]) -> None:
        futures = [self._pool.submit(t) for t in tasks]
        _, not_done = wait(futures, return_when=FIRST_EXCEPTION)
        for fut in not_done:
            fut.cancel()
        wait(futures)
        for fut in futures:
            if not fut.cancelled() and fut.exception() is not None:
                raise fut.exception()  # type: ignore[misc]

    def _finish(self, *, failed: bool) -> None:
        self._finished = True
        for fut in self._pending:
            fut.cancel()
        wait(self._pending)
        self._pending.clear()
        leftovers = self._parts + self._temps
        late: set[Future[None]] = set()
        if leftovers:
            # After a success the parts are deleted like any object; after a failure, quickly
            # and within the discard bound: a storage that sits on deletes must not hold a
            # failed rank for the request deadline per part.
            policy, timeout = None, None
            if failed:
                policy = discard_policy(self._discard_seconds, self._objects.policy.stall_seconds)
                timeout = self._discard_seconds
            futures = [
                self._pool.submit(self._objects.delete, n, missing_ok=True, policy=policy)
                for n in leftovers
            ]
            _, late = wait(futures, timeout=timeout)
            errors = [f.exception() for f in futures if f not in late and f.exception()]
            if errors or late:
                log.warning(
                    "could not delete %d temporary parts of %s%s (first error: %s)",
                    len(errors) + len(late),
                    self._objects.url(self._name),
                    f", {len(late)} not done in {timeout} s" if late else "",
                    errors[0] if errors else "none",
                )
        # Deletes still running end within their policy's deadline; queued ones are dropped.
        self._pool.shutdown(wait=not late, cancel_futures=True)
        self._buf = None
        super().close()
        if failed:
            log.debug("upload of %s discarded", self._objects.url(self._name))


def _bind_compose(objects: GcsObjects, dest: str, sources: Sequence[str]) -> Callable[[], None]:
    return lambda: objects.compose(dest, sources)
