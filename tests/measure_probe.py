"""A rank that records what happens around its timed operations, for the measurement tests.

``python -m tests.measure_probe`` runs an ordinary rank (:func:`ckptbench.workload.rank.worker.run`)
after wrapping, in its own process, the calls the rules of measurement are about, and writes what
it saw to ``$MEASURE_PROBE_DIR/events-RANK.json``: one ``[kind, name, wall time]`` per event, the
wall time from ``time.time()`` (the clock of each sample's ``started_at``/``ended_at``).

- ``enter``/``exit``: work around the samples (the shard built, load templates made and marked,
  storage writers and readers made and wrapped, the storage session opened, loads verified) and
  DCP's ``save``/``load`` calls;
- ``barrier-enter``/``barrier-exit``: the loop's own barriers (DCP's internal ones are not ours);
- ``gc-start``/``gc-stop``: every full (oldest generation) garbage collection, on any thread;
- ``client``: a gcsfs file system constructed (its ``id``); ``fs``: the file system a gcsfs
  writer or reader was given (its ``id``).

Faults that make a wrong measurement visible, each set by an environment variable:
``MEASURE_PROBE_LATE_RANK`` and ``MEASURE_PROBE_LATE_SECONDS`` (that rank arrives late at each of
the loop's barriers), ``MEASURE_PROBE_SLOW_FINISH`` (the file backend's ``finish``, the
coordinator's ``.metadata`` write, takes that much longer), ``MEASURE_PROBE_SLOW_BUILD`` (building
the shard takes that much longer).
"""

from __future__ import annotations

import functools
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results.rank import RankResult

ENV_DIR = "MEASURE_PROBE_DIR"
ENV_LATE_RANK = "MEASURE_PROBE_LATE_RANK"
ENV_LATE_SECONDS = "MEASURE_PROBE_LATE_SECONDS"
ENV_SLOW_FINISH = "MEASURE_PROBE_SLOW_FINISH"
ENV_SLOW_BUILD = "MEASURE_PROBE_SLOW_BUILD"
COMMAND = [sys.executable, "-m", "tests.measure_probe"]

# Work around the samples (setup, and verification after a load): each must run outside every
# timed region.
SETUP = (
    "open_session",
    "build_state",
    "fill_expected",
    "verify",
    "empty_template",
    "mark_unwritten",
    "session.writer",
    "session.reader",
    "timed_writer",
    "timed_reader",
)
Event = tuple[str, str, float]


class _Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []  # list.append is atomic: threads may record too

    def add(self, kind: str, name: str) -> None:
        self.events.append((kind, name, time.time()))

    def span(self, name: str, call: Callable[..., Any], delay: float = 0.0) -> Callable[..., Any]:
        @functools.wraps(call)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.add("enter", name)
            try:
                if delay:
                    time.sleep(delay)
                return call(*args, **kwargs)
            finally:
                self.add("exit", name)

        return wrapped


def _install(rec: _Recorder, config: WorkloadConfig) -> None:
    import torch.distributed as dist
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    from ckptbench.workload.rank import loop, operations, state
    from ckptbench.workload.storage import session as factory
    from ckptbench.workload.storage import timing

    env = os.environ
    build_delay = float(env.get(ENV_SLOW_BUILD, "0"))
    # By module attribute, as the loop calls them (``state.build_state(...)``, ``dcp_save(...)``).
    wrapped: list[tuple[Any, str, str, float]] = [
        (state, "build_state", "build_state", build_delay),
        (state, "fill_expected", "fill_expected", 0.0),  # a tensor's values, within build_state
        (state, "verify", "verify", 0.0),
        (state, "empty_template", "empty_template", 0.0),
        (state, "mark_unwritten", "mark_unwritten", 0.0),
        (timing, "timed_writer", "timed_writer", 0.0),
        (timing, "timed_reader", "timed_reader", 0.0),
        (factory, "open_session", "open_session", 0.0),
        # The timed operations call DCP from operations.py; the reference procedure's saves
        # from loop.py.
        (operations, "dcp_save", "dcp.save", 0.0),
        (operations, "dcp_load", "dcp.load", 0.0),
        (loop, "dcp_save", "dcp.save", 0.0),
    ]
    for owner, attr, name, delay in wrapped:
        setattr(owner, attr, rec.span(name, getattr(owner, attr), delay))
    for attr in ("writer", "reader"):
        made = rec.span(f"session.{attr}", getattr(factory.StorageSession, attr))
        setattr(factory.StorageSession, attr, _noting_fs(rec, made))

    finish_delay = float(env.get(ENV_SLOW_FINISH, "0"))
    if finish_delay:
        slow = rec.span("finish", FileSystemWriter.finish, finish_delay)
        FileSystemWriter.finish = slow  # type: ignore[method-assign]

    late = (
        float(env.get(ENV_LATE_SECONDS, "0")) if env.get(ENV_LATE_RANK) == str(config.rank) else 0
    )
    real_barrier = dist.barrier

    def barrier(*args: Any, **kwargs: Any) -> Any:
        if not sys._getframe(1).f_globals.get("__name__", "").startswith("ckptbench.workload"):
            return real_barrier(*args, **kwargs)
        if late:
            time.sleep(late)
        rec.add("barrier-enter", "")
        try:
            return real_barrier(*args, **kwargs)
        finally:
            rec.add("barrier-exit", "")

    dist.barrier = barrier

    def on_collection(phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") == 2:
            rec.add(f"gc-{phase}", "")

    gc.callbacks.append(on_collection)

    if config.backend.value == "gcsfs":
        import gcsfs

        real_init = gcsfs.GCSFileSystem.__init__

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            rec.add("client", str(id(self)))
            real_init(self, *args, **kwargs)

        gcsfs.GCSFileSystem.__init__ = init


def _noting_fs(rec: _Recorder, made: Callable[..., Any]) -> Callable[..., Any]:
    """Records the file system a gcsfs writer or reader (DCP's fsspec ones) was given."""

    @functools.wraps(made)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        obj = made(*args, **kwargs)
        fs = getattr(obj, "fs", None)  # DCP's FileSystem, whose own ``fs`` is the fsspec one
        fs = getattr(fs, "fs", None)
        if fs is not None and type(fs).__module__.startswith("gcsfs"):
            rec.add("fs", str(id(fs)))
        return obj

    return wrapped


def main() -> int:
    from ckptbench.workload.rank import worker
    from ckptbench.workload.storage import session as factory

    config = WorkloadConfig.from_env()
    factory.prepare_gcsfs()  # before anything imports gcsfs, as the worker does
    rec = _Recorder()
    _install(rec, config)
    code = worker.run(config)
    out = Path(os.environ[ENV_DIR]) / f"events-{config.rank}.json"
    out.write_text(json.dumps(rec.events))
    return code


# -- reading what the ranks left (in the test process) ---------------------------------------------


@dataclass
class Rank:
    result: RankResult
    events: list[Event]

    def times(self, kind: str, name: str = "") -> list[float]:
        return [t for k, n, t in self.events if k == kind and n == name]

    def spans(self, name: str) -> list[tuple[float, float]]:
        return list(zip(self.times("enter", name), self.times("exit", name), strict=True))

    def windows(self, op: str) -> list[tuple[float, float]]:
        """Each timed sample's (started_at, ended_at) as the rank reported them."""
        timing = getattr(self.result, op)
        assert timing is not None and timing.started_at and timing.ended_at, self.result
        return list(zip(timing.started_at, timing.ended_at, strict=True))


def read_ranks(config: WorkloadConfig, probe_dir: Path) -> list[Rank]:
    """Every rank's full result (beside the checkpoint) and its events."""
    from ckptbench.workload.storage import objects as objectio

    ranks = []
    for rank in range(config.world_size):
        text = objectio.read_text(f"{config.results_path}/rank-{rank:05d}.json")
        result = RankResult.model_validate_json(text)
        events = json.loads((probe_dir / f"events-{rank}.json").read_text())
        ranks.append(Rank(result, [(k, n, t) for k, n, t in events]))
    return ranks


if __name__ == "__main__":
    from ckptbench.workload.rank.worker import end_rank

    end_rank(main())
