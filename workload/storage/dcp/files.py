"""A DCP writer's files, each a unit that fails the save or is written again, and reads likewise.

DCP's ``FileSystemWriter`` writes a rank's items into files, ``thread_count`` threads writing one
file at a time each (torch 2.13). A file that fails in any thread but the caller's is lost: the
thread dies with a traceback on stderr, its results never reach the save, and DCP writes a
``.metadata`` without its items. The save returns as if it had succeeded and the load after it
fails with a ``KeyError`` naming a tensor (measured on the s3 backend with two threads).
:func:`keep_files` catches every file's failure in its own thread, lets the other files finish,
and fails the save with that file's own error, whichever thread wrote it.

Given a ``transient`` test, a file whose failure passes it is written again, whole: its bytes were
streamed from the tensors and not kept, so DCP's planner resolves the same tensors again. The
s3 backend passes the 429s its client does not retry (:mod:`ckptbench.workload.storage.s3.
throttling`). :func:`retry_reads` does the same for a reader, one file's items at a time, and
both retry the ``.metadata`` (the writer's ``finish``, the reader's ``read_metadata``). Retries
follow the rank's :class:`~ckptbench.workload.storage.retry.RetryPolicy` (attempts, full-jitter
waits, the deadline of one operation), each logged as a warning naming the object and the cause,
so a figure that includes them says so; when they run out the error says how many were made.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from torch.futures import Future

from ckptbench.workload.storage import torch_seam
from ckptbench.workload.storage.retry import (
    DEFAULT_POLICY,
    Operation,
    RetryPolicy,
    pause_or_give_up,
)

T = TypeVar("T")
# The cause of a failure worth another try (e.g. "HTTP 429 TooManyRequests"), or None. It must be
# a module-level function: DCP's process checkpointer pickles the writer that holds it.
Transient = Callable[[BaseException], "str | None"]


class RetriesExhausted(RuntimeError):
    """A transfer kept failing for a transient cause until the policy's bounds were reached."""


def attempt(
    fn: Callable[[], T],
    what: str,
    transient: Transient,
    policy: RetryPolicy = DEFAULT_POLICY,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``fn()``, called again after a wait while it fails for a ``transient`` cause, within
    ``policy``; any other failure is raised as it is. ``what`` names the transfer and object."""
    op = policy.start(clock)
    started = op.remaining()
    for tries in range(1, policy.attempts + 1):
        try:
            return fn()
        except Exception as exc:
            cause = transient(exc)
            if cause is None:
                raise
            _pause_or_stop(op, tries, what, cause, started, exc, sleep)
    raise AssertionError("unreachable")  # pragma: no cover


def _pause_or_stop(
    op: Operation,
    tries: int,
    what: str,
    cause: str,
    started: float,
    exc: BaseException,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """The retry policy's wait before the next try, or :class:`RetriesExhausted` (chaining
    ``exc``) when it has run out; the cause is one the client does not retry by itself."""
    cause = f"{cause}, which the client does not retry"
    given_up = pause_or_give_up(op, tries, what, cause, started, sleep)
    if given_up is not None:
        raise RetriesExhausted(given_up) from exc


class _CatchingFileSystem:
    """The writer's file system for one batch of files: a file that fails is noted and not
    raised, so its thread goes on to its next file and every thread is joined."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.failures: dict[str, Exception] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    @contextmanager
    def create_stream(self, path: Any, mode: str) -> Iterator[Any]:
        try:
            opened = self.inner.create_stream(path, mode)
            stream = opened.__enter__()
        except Exception as exc:  # e.g. the upload could not start: DCP's loop runs on, unheard
            self._note(path, exc)
            yield _Sink()
            return
        try:
            yield stream
        except Exception as exc:
            try:  # the file's own stream sees the failure first (an upload aborts)
                opened.__exit__(type(exc), exc, exc.__traceback__)
            except Exception as raised:
                exc = raised
            self._note(path, exc)
            return
        except BaseException as exc:
            opened.__exit__(type(exc), exc, exc.__traceback__)
            raise
        try:  # an upload completes here
            opened.__exit__(None, None, None)
        except Exception as exc:
            self._note(path, exc)

    def _note(self, path: Any, exc: Exception) -> None:
        with self._lock:
            self.failures.setdefault(str(path), exc)


class _Sink(io.RawIOBase):
    """Where DCP writes a file whose stream could not be opened: nowhere, its position kept."""

    def __init__(self) -> None:
        super().__init__()
        self._position = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self._position += n
        return n

    def tell(self) -> int:
        return self._position


class _FileWrites:
    """Stands in for what writes the writer's queue of files (:func:`torch_seam.write_files`):
    writes them, then again those that failed for a transient cause; raises any other failure."""

    def __init__(
        self, writer: Any, transient: Transient | None, policy: RetryPolicy, label: str
    ) -> None:
        self.writer = writer
        self.transient = transient
        self.policy = policy
        self.label = label

    def __call__(self, planner: Any, file_queue: queue.Queue[Any]) -> Future[list[Any]]:
        pending = _drain(file_queue)
        written: list[Any] = []
        op = self.policy.start()
        started = op.remaining()
        for tries in range(1, self.policy.attempts + 1):
            failed = self._write(planner, pending, written)
            if not failed:
                break
            causes = {path: self._cause(exc) for path, exc in failed.items()}
            path, exc = next(iter(failed.items()))
            hard = [e for p, e in failed.items() if causes[p] is None]
            if hard:
                _note_others(hard[0], len(failed) - 1)
                raise hard[0]
            more = f" and {len(failed) - 1} more file(s)" if len(failed) > 1 else ""
            what = f"{self.label}write of {path}{more}"
            _pause_or_stop(op, tries, what, str(causes[path]), started, exc)
            pending = [entry for entry in pending if str(entry[0]) in failed]
        done: Future[list[Any]] = Future()
        done.set_result(written)
        return done

    def _cause(self, exc: Exception) -> str | None:
        return None if self.transient is None else self.transient(exc)

    def _write(self, planner: Any, files: list[Any], written: list[Any]) -> dict[str, Exception]:
        """Write ``files``; add the results of those written whole to ``written``; return the
        failures by path, in the queue's order."""
        catching = _CatchingFileSystem(self.writer.fs)
        self.writer.fs = catching
        try:
            results = torch_seam.write_files(self.writer, planner, _queue(files)).wait()
        finally:
            self.writer.fs = catching.inner
        caught = catching.failures
        failed = {str(p): caught[str(p)] for p, _, _ in files if str(p) in caught}
        lost = {name for path, name, _ in files if str(path) in failed}
        written.extend(r for r in results if r.storage_data.relative_path not in lost)
        return failed


class _FileReads:
    """Stands in for the reader's ``read_data``: the plan's items one file at a time, a file
    read again when it fails for a transient cause."""

    def __init__(self, reader: Any, transient: Transient, policy: RetryPolicy, label: str) -> None:
        self.reader = reader
        self.transient = transient
        self.policy = policy
        self.label = label

    def __call__(self, plan: Any, planner: Any) -> Future[None]:
        where = torch_seam.reader_storage_data(self.reader)
        by_file: dict[str, list[Any]] = {}
        for item in plan.items:
            by_file.setdefault(where[item.storage_index].relative_path, []).append(item)
        read = type(self.reader).read_data
        for name, items in by_file.items():
            one = dataclasses.replace(plan, items=items)
            attempt(
                functools.partial(_wait, read, self.reader, one, planner),
                f"{self.label}read of {self.reader.path}/{name}",
                self.transient,
                self.policy,
            )
        done: Future[None] = Future()
        done.set_result(None)
        return done


class _Attempted:
    """Stands in for one method of ``owner`` (``finish``, ``read_metadata``): the class's own,
    called again while it fails for a transient cause."""

    def __init__(
        self, owner: Any, name: str, what: str, transient: Transient, policy: RetryPolicy
    ) -> None:
        self.owner = owner
        self.name = name
        self.what = what
        self.transient = transient
        self.policy = policy

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        method = getattr(type(self.owner), self.name)
        return attempt(
            lambda: method(self.owner, *args, **kwargs), self.what, self.transient, self.policy
        )


def keep_files(
    writer: T,
    transient: Transient | None = None,
    policy: RetryPolicy = DEFAULT_POLICY,
    label: str = "",
) -> T:
    """Make a failed file fail ``writer``'s save whichever thread wrote it; with ``transient``,
    write such files again, and the ``.metadata`` (``finish``) likewise. ``label`` starts each
    retry's warning (``"[rank 3] "``). Returns ``writer``."""
    torch_seam.send_file_writes_to(writer, _FileWrites(writer, transient, policy, label))
    if transient is not None:
        what = f"{label}finish (the .metadata) of {getattr(writer, 'path', '')}"
        setattr(writer, "finish", _Attempted(writer, "finish", what, transient, policy))  # noqa: B010
    return writer


def retry_reads(
    reader: T, transient: Transient, policy: RetryPolicy = DEFAULT_POLICY, label: str = ""
) -> T:
    """Read each of ``reader``'s files again, and its ``.metadata``, while they fail for a
    ``transient`` cause. Returns ``reader``."""
    what = f"{label}read of {getattr(reader, 'path', '')}/.metadata"
    setattr(reader, "read_data", _FileReads(reader, transient, policy, label))  # noqa: B010
    setattr(reader, "read_metadata", _Attempted(reader, "read_metadata", what, transient, policy))  # noqa: B010
    return reader


def _wait(method: Callable[..., Any], *args: Any) -> Any:
    return method(*args).wait()


def _drain(file_queue: queue.Queue[Any]) -> list[Any]:
    files = []
    while True:
        try:
            files.append(file_queue.get_nowait())
        except queue.Empty:
            return files


def _queue(files: list[Any]) -> queue.Queue[Any]:
    made: queue.Queue[Any] = queue.Queue()
    for entry in files:
        made.put(entry)
    return made


def _note_others(exc: Exception, others: int) -> None:
    if others:
        exc.add_note(f"{others} more of this rank's files failed in the same save")
