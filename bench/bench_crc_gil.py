"""What releasing the GIL for every crc32c call cost a load of many small tensors.

The gcs reader checksums what it reads with google-crc32c's C function, called through ctypes on
the read threads. Released for the call, the GIL must be taken back after it, and with 8 threads
that queue can last up to the interpreter's switch interval: a load of 1,500 tensors makes three
calls a tensor. ``crc.RELEASE_GIL_MIN_BYTES`` (2 MiB) keeps the GIL for smaller buffers. This
bench loads, in one process from the embedded emulator (its data in /dev/shm), ``--tensors``
tensors of (``--rows``, 1000) float32 with our reader (8 threads, checksums on), the threshold at
0 (every call releases the GIL: the old way) and at its default, interleaved A B B A over
``--rounds`` rounds, and prints the load seconds and the read threads' seconds inside crc calls,
medians [min-max], and the ratio of the medians.

Run: ``.venv/bin/python bench/bench_crc_gil.py`` (about 2 minutes).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from emulator_in_memory import emulator_in_memory

from ckptbench.workload.storage.gcs import crc

BUCKET = "crcgil"


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tensors", type=int, default=1500)
    p.add_argument("--rows", type=int, default=200, help="rows of 1000 float32: 800 KB")
    p.add_argument("--rounds", type=int, default=4)
    a = p.parse_args()
    warnings.simplefilter("ignore", UserWarning)

    import torch
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    from ckptbench.workload.storage.gcs.backend import GcsStorageReader, GcsStorageWriter

    torch.set_num_threads(1)
    spent = [0.0]
    lock = threading.Lock()
    value = crc.value

    def timed(*args: Any) -> int:
        t0 = time.perf_counter()
        try:
            return value(*args)
        finally:
            with lock:
                spent[0] += time.perf_counter() - t0

    crc.value = timed  # type: ignore[assignment]
    default = crc.RELEASE_GIL_MIN_BYTES
    modes = {"release always": 0, "default": default}
    seconds: dict[str, list[float]] = {m: [] for m in modes}
    in_crc: dict[str, list[float]] = {m: [] for m in modes}
    with emulator_in_memory("ckptbench-crc-", BUCKET):
        sd = {f"t{i}": torch.rand(a.rows, 1000) for i in range(a.tensors)}
        cid = f"gs://{BUCKET}/ckpt"
        dcp_save(sd, storage_writer=GcsStorageWriter(cid))
        order = list(modes)
        for r in range(a.rounds):
            for mode in order if r % 2 == 0 else order[::-1]:
                crc.RELEASE_GIL_MIN_BYTES = modes[mode]
                template = {k: torch.empty_like(v) for k, v in sd.items()}
                gc.collect()
                gc.disable()
                spent[0] = 0.0
                t0 = time.perf_counter()
                dcp_load(template, storage_reader=GcsStorageReader(cid))
                seconds[mode].append(time.perf_counter() - t0)
                gc.enable()
                in_crc[mode].append(spent[0])
                assert all(torch.equal(template[k], v) for k, v in sd.items())
                print(f"  round {r + 1} {mode}: load {seconds[mode][-1]:.2f} s", flush=True)
    crc.RELEASE_GIL_MIN_BYTES = default
    print(f"\n{a.tensors} tensors of ({a.rows}, 1000) float32, 8 read threads, {a.rounds} rounds:")
    for mode in modes:
        print(f"  {mode:14}: load {med(seconds[mode])} s, threads in crc {med(in_crc[mode])} s")
    x = statistics.median(seconds["release always"]) / statistics.median(seconds["default"])
    print(f"  load speed, default / release always: {x:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
