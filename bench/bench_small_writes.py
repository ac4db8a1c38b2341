"""What the gcs upload stream's short path for small writes saves, in CPU per write.

``torch.save`` hands the upload stream dozens of writes per tensor (zip records, padding, the
pickle, the payload). ``CompositeUploadStream.write`` appends a write that fits in the part
buffer without going through the slow path that decides about parts; both paths send the same
requests (a test counts them), so the short path's worth is CPU time, measured here.

The writes replayed are the ones DCP's ``torch.save`` of ``--tensors`` small tensors (one call an
item, into one stream) makes, recorded once. Each round replays them into a stream over in-memory
objects (no network: only the stream's own cost) twice, short path then slow path in turn
(A B A B ...: a drift cancels); the figures are medians over ``--rounds`` with their spread, and
the ratio per round.

    .venv/bin/python bench/bench_small_writes.py --tensors 2000 --rounds 9
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Sequence
from typing import IO, Any, cast

import torch

from ckptbench.workload.storage.gcs.upload import CompositeUploadStream
from ckptbench.workload.storage.retry import DEFAULT_POLICY


class _Recorder(io.RawIOBase):
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.writes.append(bytes(b))
        return len(self.writes[-1])


class _MemoryObjects:
    """The calls the stream makes of its bucket, answered in memory."""

    policy = DEFAULT_POLICY

    def __init__(self) -> None:
        self.requests = 0

    def url(self, name: str) -> str:
        return f"mem://{name}"

    def upload(self, name: str, data: Any) -> int | None:
        self.requests += 1
        return None

    def compose(self, name: str, sources: Sequence[str], expected_crc: int | None = None) -> None:
        self.requests += 1

    def delete(self, name: str, **_: Any) -> None:
        self.requests += 1


class _NoShortPath(CompositeUploadStream):
    def write(self, b: Any) -> int:
        return self._write(b)


def recorded_writes(tensors: int) -> list[bytes]:
    """The writes of a rank's data object: DCP ``torch.save``s each item into the one stream."""
    recorder = _Recorder()
    for i in range(tensors):
        torch.save(torch.arange(i, i + 16, dtype=torch.float32), cast("IO[bytes]", recorder))
    return recorder.writes


def replay(kind: type[CompositeUploadStream], writes: list[bytes], part: int) -> tuple[float, int]:
    objects = _MemoryObjects()
    stream = kind(objects, "x", threads=2, part_size=part)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    for b in writes:
        stream.write(b)
    stream.close()
    return time.perf_counter() - t0, objects.requests


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensors", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--part-mib", type=int, default=8)
    args = parser.parse_args(argv)
    writes = recorded_writes(args.tensors)
    part = args.part_mib << 20
    short: list[float] = []
    slow: list[float] = []
    requests: set[tuple[int, int]] = set()
    replay(CompositeUploadStream, writes, part)  # warm-up, untimed
    for _ in range(args.rounds):
        a, ra = replay(CompositeUploadStream, writes, part)
        b, rb = replay(_NoShortPath, writes, part)
        short.append(a)
        slow.append(b)
        requests.add((ra, rb))
    ratios = [b / a for a, b in zip(short, slow, strict=True)]
    total = sum(len(w) for w in writes)
    print(f"{len(writes)} writes ({total / 2**20:.2f} MiB) from torch.save of {args.tensors} "
          f"tensors; parts of {args.part_mib} MiB; {args.rounds} rounds, A B A B")  # fmt: skip
    for label, runs in (("short path", short), ("slow path only", slow)):
        per_write = statistics.median(runs) / len(writes) * 1e9
        print(f"  {label:15s} median {statistics.median(runs) * 1e3:7.2f} ms "
              f"(min {min(runs) * 1e3:.2f}, max {max(runs) * 1e3:.2f}), "
              f"{per_write:.0f} ns a write")  # fmt: skip
    print(f"  slow / short: median {statistics.median(ratios):.2f} x "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})")  # fmt: skip
    print(f"  requests (short, slow) per round: {sorted(requests)}")


if __name__ == "__main__":
    main()
