"""What stops a rank's loop, each named so that the result says which rank failed and why.

A rank whose load differs from what was saved raises :class:`VerificationError` (either layout,
:mod:`.state` or :mod:`.model_state`). A rank that fails tells the others through the loop's
closing barrier; they stop with a :class:`PeerFailure` and the failing rank reports the cause. DCP
gathers every rank's exception into one ``CheckpointException``, which :class:`CheckpointFailure`
turns into a line per rank.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence

from torch.distributed.checkpoint.api import CheckpointException


class VerificationError(AssertionError):
    """Loaded tensors differ from what was saved. Names the rank and every tensor at fault."""

    def __init__(self, rank: int, tensors: Sequence[str], details: Sequence[str]) -> None:
        self.rank = rank
        self.tensors = list(tensors)
        self.details = list(details)
        shown = ", ".join(self.tensors[:8]) + (" ..." if len(self.tensors) > 8 else "")
        super().__init__(f"{shown} on rank {rank}: " + "; ".join(self.details[:8]))


class PeerFailure(RuntimeError):
    """Another rank failed; this one stops with it. The failing rank reports the cause."""


class CheckpointFailure(RuntimeError):
    """DCP reported failures; the message names each failing rank and its error, briefly."""

    @classmethod
    def of(cls, op: str, exc: CheckpointException, where: str) -> CheckpointFailure:
        parts = []
        for rank, (cause, _trace) in sorted(exc.failures.items()):
            parts.append(f"rank {rank}: {_describe(cause, where)}")
        return cls(f"{op} failed on " + "; ".join(parts))


def _describe(cause: BaseException, where: str) -> str:
    # torch.save reports a full disk as "unexpected pos 704 vs 598"; the OSError that caused it
    # is only in the exception's context. Name the errno and the path instead.
    seen: BaseException | None = cause
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno is not None:
            name = errno.errorcode.get(seen.errno, str(seen.errno))
            path = seen.filename or where
            if seen is not cause or seen.errno == errno.ENOSPC:
                return f"{name}: {seen.strerror} ({path})"
            break
        seen = seen.__cause__ or seen.__context__
    return f"{type(cause).__name__}: {cause}"


class AsyncSaveError(RuntimeError):
    """An async save's future did not deliver the checkpoint's metadata."""
