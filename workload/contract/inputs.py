"""Reading a file a user names (a results file, a manifest), bounded whatever the file is.

A size check on a regular file is not a bound: ``/dev/zero``, a FIFO and a pipe have no size, and
reading one to its end grew ``ckptbench compare`` to 19 GB. Every input is read in chunks that
stop one byte past the bound. The file is opened without waiting for a writer, so a FIFO nobody
writes reads as empty instead of hanging the open; reads then block as usual, so a process
substitution (``<(cat a.json)``) still delivers everything its writer sends.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import BinaryIO

_CHUNK = 1024**2


class InputTooLarge(ValueError):
    """The input holds more than its bound; the message gives the bound."""


def read_bounded(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """At most ``limit`` bytes of ``path`` (``what``: "a manifest file", named in the message);
    raises :class:`InputTooLarge` past them and ``OSError`` when it cannot be opened or read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.set_blocking(fd, True)
        return _bounded(lambda n: os.read(fd, n), limit, what)
    finally:
        os.close(fd)


def read_stream(stream: BinaryIO, limit: int, what: str) -> bytes:
    """At most ``limit`` bytes of an open stream (standard input); as :func:`read_bounded`."""
    return _bounded(stream.read, limit, what)


def _bounded(read: Callable[[int], bytes], limit: int, what: str) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while chunk := read(min(_CHUNK, limit + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise InputTooLarge(f"more than {limit} bytes: {what} may hold at most {limit} bytes")
    return b"".join(chunks)
