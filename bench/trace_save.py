"""Where one rank's gcs save goes under the network model: every request on a timeline.

One process saves ``--tensors`` tensors of (``--rows``, 1000) float32 with our DCP writer through
:mod:`netmodel` (``--rate`` bytes/s per connection each way, ``--rtt`` s per request) in front of
the embedded emulator (``--scheme compose``) or of ``workload/local/loopback/xml_multipart.py``
in front of it (``--scheme multipart``), ``--reps`` times; ``--bare`` leaves the model out, to see
what the emulator's own assembly costs. For each save it prints the seconds and MB/s, and each
request (start and end in seconds from the save's start, what it was, its part's bytes): the part
uploads, the initiation and completion (multipart) or the compose and deletes (compose), the crc32c
check and ``.metadata`` (written as ``.metadata.tmp``, then renamed: a copy and a delete). The
model's limit for one rank is ``threads x rate``.

Run: ``.venv/bin/python bench/trace_save.py --scheme multipart`` (under a minute).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from emulator_in_memory import emulator_in_memory
from netmodel import NetModel

from ckptbench.workload.contract.choices import UploadScheme
from ckptbench.workload.local.loopback.xml_multipart import XmlMultipartShim

MB = 1e6
BUCKET = "trace"
# What is traced: (class, method, how to describe one call from its arguments).
_CALLS = (
    ("XmlMultipartUpload", "initiate", lambda a: ""),
    ("XmlMultipartUpload", "put_part", lambda a: f"part {a[0] + 1}, {a[1].nbytes} bytes"),
    ("XmlMultipartUpload", "complete", lambda a: f"{a[0]} parts"),
    ("GcsObjects", "upload", lambda a: f"{a[0]}, {memoryview(a[1]).nbytes} bytes"),
    ("GcsObjects", "compose", lambda a: f"{a[0]} from {len(a[1])}"),
    ("GcsObjects", "copy", lambda a: f"{a[0]} to {a[1]}"),
    ("GcsObjects", "delete", lambda a: a[0]),
    ("GcsObjects", "stat", lambda a: a[0]),
)


def trace(log: list[tuple[float, float, str, str]], start: list[float]) -> None:
    """Wrap each traced call so that it appends (start, end, name, what) to ``log``."""
    from ckptbench.workload.storage.gcs import multipart, objects

    owners = {"XmlMultipartUpload": multipart.XmlMultipartUpload, "GcsObjects": objects.GcsObjects}
    lock = threading.Lock()
    for owner, method, describe in _CALLS:
        call = getattr(owners[owner], method)

        def timed(self: Any, *args: Any, _call: Any = call, _name: str = method,
                  _describe: Any = describe, **kwargs: Any) -> Any:  # fmt: skip
            t0 = time.perf_counter() - start[0]
            try:
                return _call(self, *args, **kwargs)
            finally:
                t1 = time.perf_counter() - start[0]
                with lock:
                    log.append((t0, t1, _name, str(_describe(args))))

        setattr(owners[owner], method, timed)


@contextlib.contextmanager
def chain(scheme: str, rate: float, rtt: float, bare: bool) -> Iterator[str]:
    """emulator <- [shim] <- [model]: the URL the rank talks to."""
    with (
        emulator_in_memory("ckptbench-trace-", BUCKET) as (tmp, emu),
        contextlib.ExitStack() as stack,
    ):
        upstream = emu.url
        if scheme == "multipart":
            shim = stack.enter_context(XmlMultipartShim(emu.url, scratch=tmp).running())
            upstream = shim.url
        if bare:
            yield upstream
            return
        model = stack.enter_context(NetModel(upstream, rate, rtt).running())
        yield model.url


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--scheme", choices=("compose", "multipart"), default="multipart")
    p.add_argument("--tensors", type=int, default=2)
    p.add_argument("--rows", type=int, default=8192, help="rows of 1000 float32: 32.8 MB")
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--rate", type=float, default=5e6, help="model: bytes/s per connection")
    p.add_argument("--rtt", type=float, default=0.02, help="model: seconds added per request")
    p.add_argument("--bare", action="store_true", help="no network model: the emulator's own cost")
    a = p.parse_args()
    warnings.simplefilter("ignore", UserWarning)

    import torch
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    from ckptbench.workload.storage.gcs.backend import GcsStorageWriter

    log: list[tuple[float, float, str, str]] = []
    start = [0.0]
    trace(log, start)
    sd = {f"t{i}": torch.rand(a.rows, 1000) for i in range(a.tensors)}
    total = sum(t.numel() * t.element_size() for t in sd.values())
    where = (
        "bare chain"
        if a.bare
        else (
            f"model {a.rate / MB:g} MB/s per connection, {a.rtt * 1000:.0f} ms per request: limit "
            f"{a.threads * a.rate / MB:.0f} MB/s"
        )
    )
    print(
        f"one rank, {a.tensors} x ({a.rows}, 1000) float32 = {total / MB:.1f} MB, {a.scheme}, "
        f"{a.threads} threads; {where}"
    )
    with chain(a.scheme, a.rate, a.rtt, a.bare) as url:
        os.environ["STORAGE_EMULATOR_HOST"] = url
        for rep in range(a.reps):
            writer = GcsStorageWriter(
                f"gs://{BUCKET}/rep{rep}", threads=a.threads,
                upload_scheme=UploadScheme(a.scheme),
            )  # fmt: skip
            log.clear()
            start[0] = time.perf_counter()
            dcp_save(sd, storage_writer=writer)
            seconds = time.perf_counter() - start[0]
            print(f"save {rep + 1}: {seconds:.2f} s, {total / seconds / MB:.1f} MB/s")
            for t0, t1, name, what in sorted(log):
                print(f"  {t0:6.2f} {t1:6.2f}  {name:9} {what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
