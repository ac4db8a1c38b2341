"""gcs vs gcsfs on the embedded emulator, bare and under a GCS-like network model.

Prints, in one run, with the systems interleaved (A B A B ...) over ``--rounds`` rounds:

1. save and load throughput of ``ckptbench run`` with the gcs and gcsfs backends, at 1 and 2
   ranks, on the bare emulator and through :mod:`netmodel` (each connection capped at ``--rate``
   bytes/s each way, ``--rtt`` s added per request); medians, spread (min-max) and gcs/gcsfs
   ratios;
2. under the model: the model's limit for our gcs backend (ranks x threads streams x rate) and a
   single-stream yardstick (one request carrying a shard's bytes up, one down, through the
   model), with gcs's figures as a fraction of the limit and a multiple of the yardstick;
3. crc32c's cost: an in-process save and load of one shard on the bare emulator with checksums on
   and off, interleaved;
4. peak RSS per rank as a ratio to its shard (from the runner's ``wait4``).

The emulator and the model proxy share this machine's cores with the ranks: under the model the
proxy's own CPU (it copies every byte twice, in Python) is part of what is measured; the figures
say how the clients compare, not what GCS gives.

Run: ``.venv/bin/python bench/bench_storage.py`` (about ten minutes with the defaults).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from netmodel import NetModel

from ckptbench.workload.contract import sizes
from ckptbench.workload.local.emulator import GcsEmulator

MB = 1e6
BUCKET = "bench"


def run(url: str, backend: str, ranks: int, layer: int, padding: int, samples: int,
        threads: int, out: Path) -> dict[str, Any]:  # fmt: skip
    env = dict(os.environ, STORAGE_EMULATOR_HOST=url, OMP_NUM_THREADS="1")
    cmd = [
        sys.executable, "-m", "ckptbench.cli", "run",
        "--storage", f"gs://{BUCKET}/{backend}-{ranks}-{time.monotonic_ns()}",
        "--backend", backend, "--world-size", str(ranks),
        "--layer-size", str(layer), "--padding-size", str(padding),
        "--samples", str(samples), "--warmup", "1", "--threads", str(threads),
        "--json", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"ckptbench run failed: {' '.join(cmd)}")
    [cell] = json.loads(out.read_text())["runs"]
    result: dict[str, Any] = cell
    return result


def single_stream(url: str, nbytes: int) -> tuple[float, float]:
    """Bytes/s of one media upload and one download of ``nbytes`` over one connection."""
    parsed = urllib.parse.urlsplit(url)
    body = os.urandom(1 << 20) * (nbytes >> 20)
    name = f"yardstick-{time.monotonic_ns()}"
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name={name}", body)
    conn.getresponse().read()
    up = time.perf_counter() - t0
    t0 = time.perf_counter()
    conn.request("GET", f"/download/storage/v1/b/{BUCKET}/o/{name}?alt=media")
    got = conn.getresponse().read()
    down = time.perf_counter() - t0
    conn.request("DELETE", f"/storage/v1/b/{BUCKET}/o/{name}")
    conn.getresponse().read()
    conn.close()
    assert len(got) == len(body)
    return len(body) / up, len(body) / down


def crc_cost(
    url: str, layer: int, tensors: int, rounds: int
) -> dict[bool, list[tuple[float, float]]]:
    """(save, load) bytes/s of one in-process rank with checksums on and off, interleaved."""
    import torch
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    from ckptbench.workload.storage.gcs.backend import (
        GcsFileSystem,
        GcsStorageReader,
        GcsStorageWriter,
    )
    from ckptbench.workload.storage.gcs.client import make_client

    os.environ["STORAGE_EMULATOR_HOST"] = url
    client = make_client(pool_size=12)
    sd = {f"t{i}": torch.rand(layer, 1000) for i in range(tensors)}
    nbytes = sum(t.numel() * 4 for t in sd.values())
    out: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    warnings.simplefilter("ignore", UserWarning)
    for r in range(rounds):
        for checks in (True, False) if r % 2 == 0 else (False, True):
            fs = GcsFileSystem(client=client, threads=8, part_size_bytes=32 << 20, checksums=checks)
            cid = f"gs://{BUCKET}/crc-{checks}-{r}"
            t0 = time.perf_counter()
            dcp_save(sd, storage_writer=GcsStorageWriter(cid, filesystem=fs))
            save = time.perf_counter() - t0
            template = {k: torch.empty_like(v) for k, v in sd.items()}
            t0 = time.perf_counter()
            dcp_load(template, storage_reader=GcsStorageReader(cid, filesystem=fs))
            load = time.perf_counter() - t0
            out[checks].append((nbytes / save, nbytes / load))
            for blob in client.list_blobs(BUCKET, prefix=f"crc-{checks}-{r}/"):
                blob.delete()
    return out


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs) / MB:8.1f} MB/s [{min(xs) / MB:.1f}-{max(xs) / MB:.1f}]"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--layer-size", type=int, default=8192, help="rows: 32.8 MB tensors")
    p.add_argument("--padding-size", type=int, default=4, help="tensors in all")
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--rate", type=float, default=10e6, help="model: bytes/s per connection")
    p.add_argument("--rtt", type=float, default=0.02, help="model: seconds added per request")
    p.add_argument("--ranks", default="1,2")
    a = p.parse_args()
    ranks_list = [int(x) for x in a.ranks.split(",")]
    print(
        f"storage bench: {a.padding_size} tensors of ({a.layer_size}, 1000) float32 = "
        f"{sizes.format_bytes(sizes.total_bytes(a.layer_size, a.padding_size))} in all; "
        f"{a.samples} samples + 1 warm-up per run; {a.rounds} interleaved rounds; "
        f"model: {a.rate / MB:.0f} MB/s per connection, {a.rtt * 1000:.0f} ms per request; "
        f"{os.cpu_count()} CPUs; MB = 10^6 bytes",
        flush=True,
    )
    figures: dict[tuple[str, int, str, str], list[float]] = {}
    peaks: dict[tuple[str, int], list[float]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="ckptbench-storage-bench-") as tmp,
        GcsEmulator(Path(tmp) / "emu") as emu,
    ):
        emu.create_bucket(BUCKET)
        model = NetModel(emu.url, a.rate, a.rtt)
        with model.running():
            conditions: dict[str, str] = {"bare": emu.url, "model": model.url}
            for r in range(a.rounds):
                for ranks in ranks_list:
                    for cond, url in conditions.items():
                        order = ("gcs", "gcsfs") if r % 2 == 0 else ("gcsfs", "gcs")
                        for backend in order:
                            cell = run(url, backend, ranks, a.layer_size, a.padding_size,
                                       a.samples, a.threads, Path(tmp) / "r.json")  # fmt: skip
                            for op in ("save", "load"):
                                tp = float(cell[op]["throughput_bytes_per_second"])
                                figures.setdefault((cond, ranks, backend, op), []).append(tp)
                            rss = [x for x in cell["extra"].get("peak_rss_bytes", []) if x]
                            if rss:
                                peaks.setdefault((backend, ranks), []).append(
                                    max(rss) / cell["shard_bytes"]
                                )
                            print(
                                f"  round {r + 1} {cond:5} {ranks} rank(s) {backend:5}: save "
                                f"{figures[(cond, ranks, backend, 'save')][-1] / MB:7.1f}, "
                                f"load {figures[(cond, ranks, backend, 'load')][-1] / MB:7.1f} "
                                "MB/s",
                                flush=True,
                            )
            shard = sizes.total_bytes(a.layer_size, a.padding_size) // max(ranks_list)
            yard = [single_stream(model.url, max(shard, 8 << 20)) for _ in range(a.rounds)]
        crc = crc_cost(emu.url, a.layer_size, max(1, a.padding_size // 2), a.rounds)

    print("\nthroughput (median [min-max] over rounds), gcs/gcsfs ratio of medians:")
    for cond in ("bare", "model"):
        for ranks in ranks_list:
            for op in ("save", "load"):
                ours = figures[(cond, ranks, "gcs", op)]
                theirs = figures[(cond, ranks, "gcsfs", op)]
                ratio = statistics.median(ours) / statistics.median(theirs)
                print(
                    f"  {cond:5} {ranks} rank(s) {op}: gcs {med(ours)}  gcsfs {med(theirs)}  "
                    f"ratio {ratio:5.2f} (target >= 1.0: {'met' if ratio >= 1 else 'MISSED'})"
                )
    up = statistics.median(y[0] for y in yard)
    down = statistics.median(y[1] for y in yard)
    print(
        f"\nunder the model: single stream {up / MB:.1f} MB/s up, {down / MB:.1f} MB/s down "
        f"(one request of {max(shard, 8 << 20) / MB:.0f} MB)"
    )
    for ranks in ranks_list:
        limit = ranks * a.threads * a.rate
        for op, single in (("save", up), ("load", down)):
            got = statistics.median(figures[("model", ranks, "gcs", op)])
            print(
                f"  {ranks} rank(s) gcs {op}: {got / MB:.1f} MB/s = {got / limit:.2f} of the "
                f"model's limit {limit / MB:.0f} MB/s ({ranks} x {a.threads} streams; target "
                f">= 0.67), {got / (single * ranks):.1f} x single stream per rank (target >= 3)"
            )
    print("\ncrc32c cost (1 rank, in process, bare emulator; median [min-max]):")
    for i, op in enumerate(("save", "load")):
        on = [x[i] for x in crc[True]]
        off = [x[i] for x in crc[False]]
        print(
            f"  {op}: checksums on {med(on)}, off {med(off)}: on/off "
            f"{statistics.median(on) / statistics.median(off):.2f}"
        )
    print("\npeak RSS per rank / shard (median over runs, both conditions; target <= 1.5):")
    for (backend, ranks), ratios in sorted(peaks.items()):
        print(f"  {backend:5} {ranks} rank(s): {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
