"""What a "cold" read is on this machine: page cache dropped vs O_DIRECT vs warm, same file.

Each round writes one file (``rawio.write``: tensor-sized unbuffered writes, fsynced), then reads
it three ways, the order rotating from round to round: **dropped** (``posix_fadvise(DONTNEED)``
after the fsync, as the ``file`` backend's cold loads do, then ``rawio.read``: buffered reads into
fresh memory), **direct** (``O_DIRECT`` reads of 8 MiB into one aligned buffer: the guest's page
cache is bypassed entirely) and **warm** (the file read again right after a dropped read put it
back in the page cache). ``mincore`` checks that a dropped file holds no resident page before its
read. Printed: GiB/s medians (min..max) per way and the ratio dropped / direct per round.

Run: ``.venv/bin/python bench/cold_reads.py [--mib 512] [--rounds 5] [--dir /var/tmp]``.
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import rawio
from file_vs_raw import resident_bytes

MIB = 1024**2
GIB = 1024**3
DIRECT_CHUNK = 8 * MIB
TENSOR = 32 * MIB


def drop(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if resident_bytes(path):
        raise SystemExit(f"{path}: still resident after DONTNEED; the figures would be warm")


def read_dropped(path: Path) -> float:
    drop(path)
    size = path.stat().st_size
    t0 = time.perf_counter()
    rawio.read(path, TENSOR, size // TENSOR)
    return time.perf_counter() - t0


def read_direct(path: Path) -> float:
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        with mmap.mmap(-1, DIRECT_CHUNK) as buf:  # page-aligned, as O_DIRECT needs
            t0 = time.perf_counter()
            done = 0
            while done < size:
                got = os.preadv(fd, [buf], done)
                if got <= 0:
                    raise EOFError(f"{path}: short O_DIRECT read at {done}")
                done += got
            return time.perf_counter() - t0
    finally:
        os.close(fd)


def read_warm(path: Path) -> float:
    size = path.stat().st_size
    rawio.read(path, TENSOR, size // TENSOR)  # make sure every page is cached
    t0 = time.perf_counter()
    rawio.read(path, TENSOR, size // TENSOR)
    return time.perf_counter() - t0


WAYS: dict[str, Callable[[Path], float]] = {
    "dropped": read_dropped,
    "direct": read_direct,
    "warm": read_warm,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mib", type=int, default=512, help="file size (default 512 MiB)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--dir", default="/var/tmp", help="where the file goes (a disk, not tmpfs)")
    args = p.parse_args(argv)
    size = args.mib * MIB
    rates: dict[str, list[float]] = {w: [] for w in WAYS}
    ratios = []
    names = list(WAYS)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "cold.bin"
        for r in range(args.rounds):
            rawio.write(path, rawio.pattern(TENSOR), size // TENSOR)
            order = names[r % 3 :] + names[: r % 3]
            seconds = {way: WAYS[way](path) for way in order}
            for way, s in seconds.items():
                rates[way].append(size / GIB / s)
            ratios.append(seconds["direct"] / seconds["dropped"])
            print(
                f"round {r + 1} ({', '.join(order)}): "
                + ", ".join(f"{w} {size / GIB / seconds[w]:.2f} GiB/s" for w in names),
                flush=True,
            )
            path.unlink()
    for way in names:
        xs = rates[way]
        print(f"{way:<8} {statistics.median(xs):6.2f} GiB/s ({min(xs):.2f}..{max(xs):.2f})")
    print(
        f"dropped / direct speed: median {statistics.median(ratios):.2f}x "
        f"({min(ratios):.2f}..{max(ratios):.2f}) over {args.rounds} rounds of {args.mib} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
