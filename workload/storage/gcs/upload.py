"""Parallel composite upload: a rank's parts uploaded as temporary objects, then composed.

Every emulator implements compose (none implements the XML multipart upload), so this scheme is
what runs against one. The parts are composed into the final object (hierarchically: one compose
takes at most 32 sources), then deleted. The part stream itself is :mod:`.parts`'s.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Unpack

from ckptbench.workload.storage.gcs.objects import GcsObjects
from ckptbench.workload.storage.gcs.parts import (
    PartedUploadStream,
    StreamOptions,
    require_positive,
)
from ckptbench.workload.storage.retry import discard_policy

__all__ = ["CompositeUploadStream", "first_level_groups", "require_positive"]

log = logging.getLogger(__name__)

COMPOSE_MAX_SOURCES = 32
# A composite object may have at most this many components in all.
MAX_COMPONENTS = 1024
# Components kept free for the last, short part (the buffer flushed at close).
RESERVED_COMPONENTS = 2


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


class CompositeUploadStream(PartedUploadStream):
    """The parts are temporary objects beside the object; close composes them. Compose accepts
    parts of any size, so a short part may go out whenever the component budget allows."""

    max_parts = MAX_COMPONENTS

    def __init__(self, objects: GcsObjects, name: str, **options: Unpack[StreamOptions]) -> None:
        super().__init__(objects, name, **options)
        self._prefix = parts_prefix(name)
        self._temps: list[str] = []

    def _part_name(self, index: int) -> str:
        return f"{self._prefix}{index:05d}"

    def _may_send_short(self, nbytes: int) -> bool:
        return self._short_budget_allows(MAX_COMPONENTS, RESERVED_COMPONENTS)

    def _send_part(self, index: int, data: memoryview) -> int | None:
        return self._objects.upload(self._part_name(index), data)

    def _assemble(self) -> None:
        sources: Sequence[str] = [self._part_name(i) for i in range(len(self._sizes))]
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
        # The parts were each checked on arrival; the object must be exactly them in order.
        self._objects.compose(self._name, sources, expected_crc=self._combined_crc())

    def _run_all(self, tasks: list[Callable[[], None]]) -> None:
        futures = [self._pool.submit(t) for t in tasks]
        _, not_done = wait(futures, return_when=FIRST_EXCEPTION)
        for fut in not_done:
            fut.cancel()
        wait(futures)
        for fut in futures:
            if not fut.cancelled() and fut.exception() is not None:
                raise fut.exception()  # type: ignore[misc]

    def _discard(self, pool: ThreadPoolExecutor, *, failed: bool) -> bool:
        leftovers = [self._part_name(i) for i in range(len(self._sizes))] + self._temps
        if not leftovers:
            return False
        # After a success the parts are deleted like any object; after a failure, quickly and
        # within the discard bound: a storage that sits on deletes must not hold a failed rank
        # for the request deadline per part.
        policy, timeout = None, None
        if failed:
            policy = discard_policy(self._discard_seconds, self._objects.policy.stall_seconds)
            timeout = self._discard_seconds
        futures = [
            pool.submit(self._objects.delete, n, missing_ok=True, policy=policy) for n in leftovers
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
        return bool(late)


def _bind_compose(objects: GcsObjects, dest: str, sources: Sequence[str]) -> Callable[[], None]:
    return lambda: objects.compose(dest, sources)
