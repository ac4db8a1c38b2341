"""gcs vs gcsfs on the embedded emulator, bare and under a GCS-like network model.

Prints, in one run, with the systems interleaved (A B A B ...) over ``--rounds`` rounds:

1. save and load throughput of ``ckptbench run`` with the gcs and gcsfs backends, at 1 and 2
   ranks, on the bare emulator and through :mod:`netmodel` (each connection capped at ``--rate``
   bytes/s each way, default 5 MB/s; ``--rtt`` s added per request, default 20 ms); medians,
   spread (min-max) and gcs/gcsfs ratios;
2. under the model, at a larger shard (``--limit-layer-size``): gcs with each upload scheme
   (``compose`` on the emulator; ``multipart`` through
   ``workload/local/loopback/xml_multipart.py``, the model in front of it) against the model's limit
   (ranks x threads streams x rate) and against a single stream (one request carrying a shard's
   bytes up, one down, through the model); beside it, the rate at which the emulator composes (it
   copies every byte, which GCS does not) and what the compose save would reach without that time;
3. the CPU the emulator and the model's proxy (threads of this process) spent per second of the
   ranks' timed I/O, from ``/proc`` and ``os.times``;
4. crc32c's cost: an in-process save and load of one shard on the bare emulator with checksums on
   and off, interleaved;
5. peak RSS of one rank above its RSS once the state and the load template are built (VmHWM reset
   then, minus VmRSS then), over a save and a load of ``--rss-shard`` bytes, over the shard; gcs
   and gcsfs, each in a fresh process.

Each run is one sample with no warm-up: each backend's client is made and authenticated before
the timings (the storage session), so a first sample pays no setup. The emulator keeps its data in
/dev/shm when there is one: the disk is not what the model is about. The emulator and the model
proxy share this machine's cores with the ranks; the figures say how the clients compare under a
model, not what GCS gives.

Run: ``.venv/bin/python bench/bench_storage.py`` (about 6-8 minutes on a quiet 2-core machine).
"""

from __future__ import annotations

import argparse
import contextlib
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from emulator_in_memory import scratch
from netmodel import NetModel
from procstat import reset_peak, vm

from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.local.loopback.xml_multipart import XmlMultipartShim

MB = 1e6
BUCKET = "bench"
# The gcs backend's upload schemes, each judged against the model's limit.
SCHEMES = ("compose", "multipart")


def run(url: str, backend: str, ranks: int, layer: int, padding: int, samples: int, threads: int,
        out: Path, emulator: int, scheme: str = "auto") -> dict[str, Any]:  # fmt: skip
    """One ``ckptbench run`` cell; ``cpu`` adds the CPU seconds the emulator and this process (the
    model's proxy threads) spent during it, and ``io_seconds`` the ranks' timed save and load."""
    env = dict(os.environ, STORAGE_EMULATOR_HOST=url, OMP_NUM_THREADS="1")
    cmd = [
        sys.executable, "-m", "ckptbench.cli", "run",
        "--storage", f"gs://{BUCKET}/{backend}-{ranks}-{time.monotonic_ns()}",
        "--backend", backend, "--world-size", str(ranks),
        "--layer-size", str(layer), "--padding-size", str(padding),
        "--samples", str(samples), "--warmup", "0", "--threads", str(threads),
        "--upload-scheme", scheme, "--json", str(out),
    ]  # fmt: skip
    emu0, own0 = cpu_seconds(emulator), own_cpu()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"ckptbench run failed: {' '.join(cmd)}")
    [cell] = json.loads(out.read_text())["runs"]
    result: dict[str, Any] = cell
    result["cpu"] = (cpu_seconds(emulator) - emu0, own_cpu() - own0)
    result["io_seconds"] = sum(float(cell[op]["mean_seconds"]) * samples for op in ("save", "load"))
    return result


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def emulator_pid() -> int:
    """The fake-gcs-server this process started (the bench runs exactly one)."""
    me = os.getpid()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text.split("(", 1)[1].rsplit(")", 1)
        if "fake-gcs" in name and int(rest.split()[1]) == me:
            return int(stat.parent.name)
    raise SystemExit("the emulator's process was not found")


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


def compose_rate(url: str, nbytes: int, parts: int = 16) -> float:
    """Bytes/s at which the bare emulator composes ``parts`` objects into one of ``nbytes``.

    fake-gcs-server copies every source byte into the new object (GCS composes without copying),
    so under the model this is time a gcs save spends that GCS would not charge."""
    from ckptbench.workload.storage.gcs.client import make_client
    from ckptbench.workload.storage.gcs.objects import GcsObjects

    os.environ["STORAGE_EMULATOR_HOST"] = url
    objects = GcsObjects(make_client(pool_size=4), BUCKET)
    piece = os.urandom(nbytes // parts)
    names = [f"compose-probe/{i:03d}" for i in range(parts)]
    for name in names:
        objects.upload(name, piece)
    t0 = time.perf_counter()
    objects.compose("compose-probe/all", names)
    seconds = time.perf_counter() - t0
    for name in [*names, "compose-probe/all"]:
        objects.delete(name)
    return len(piece) * parts / seconds


def rss_probe(url: str, backend: str, shard: int, threads: int) -> None:
    """Run in a child process: one rank's save and load of ``shard`` bytes (4 tensors), printing
    the peak RSS above the RSS once the state and its load template are built, as JSON."""
    import torch
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    from ckptbench.workload.contract.choices import Backend
    from ckptbench.workload.contract.config import WorkloadConfig
    from ckptbench.workload.storage.session import open_session

    warnings.simplefilter("ignore", UserWarning)
    os.environ["STORAGE_EMULATOR_HOST"] = url
    cid = f"gs://{BUCKET}/rss-{backend}-{time.monotonic_ns()}"
    config = WorkloadConfig(checkpoint_path=cid, backend=Backend(backend), threads=threads)
    session = open_session(config)
    rows = shard // 4 // 4000
    sd = {f"t{i}": torch.rand(rows, 1000) for i in range(4)}
    # Zeroed, so the template's pages are resident before the baseline, as a loaded one is.
    template = {k: torch.zeros_like(v) for k, v in sd.items()}
    base = vm("VmRSS")
    reset_peak()
    dcp_save(sd, storage_writer=session.writer(cid))
    dcp_load(template, storage_reader=session.reader(cid))
    assert all(torch.equal(template[k], v) for k, v in sd.items())
    print(json.dumps({"above": vm("VmHWM") - base, "shard": rows * 4000 * 4, "base": base}))
    session.delete_prefix(cid)


def rss(url: str, backend: str, shard: int, threads: int) -> float:
    cmd = [sys.executable, __file__, "--rss-probe", backend, "--rss-shard", str(shard),
           "--threads", str(threads)]  # fmt: skip
    env = dict(os.environ, STORAGE_EMULATOR_HOST=url, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"rss probe failed: {' '.join(cmd)}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(got["above"]) / float(got["shard"])


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs) / MB:8.1f} MB/s [{min(xs) / MB:.1f}-{max(xs) / MB:.1f}]"


def ratio(xs: list[float], ys: list[float]) -> float:
    return statistics.median(xs) / statistics.median(ys)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--layer-size", type=int, default=2048, help="rows: 8.2 MB tensors")
    p.add_argument("--padding-size", type=int, default=4, help="tensors in all")
    p.add_argument("--limit-layer-size", type=int, default=8192,
                   help="rows of the tensors for the limit runs (32.8 MB each)")  # fmt: skip
    p.add_argument("--samples", type=int, default=1)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--rate", type=float, default=5e6, help="model: bytes/s per connection")
    p.add_argument("--rtt", type=float, default=0.02, help="model: seconds added per request")
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--rss-shard", type=int, default=256 << 20, help="bytes: peak RSS shard")
    p.add_argument("--rss-probe", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.rss_probe:
        rss_probe(os.environ["STORAGE_EMULATOR_HOST"], a.rss_probe, a.rss_shard, a.threads)
        return 0
    ranks_list = [int(x) for x in a.ranks.split(",")]
    print(
        f"storage bench: {a.padding_size} tensors of ({a.layer_size}, 1000) float32 = "
        f"{sizes.format_bytes(sizes.total_bytes(a.layer_size, a.padding_size))} in all "
        f"(limit runs: ({a.limit_layer_size}, 1000) = "
        f"{sizes.format_bytes(sizes.total_bytes(a.limit_layer_size, a.padding_size))}); "
        f"{a.samples} sample(s), no warm-up, per run (each backend's client is made before the "
        f"timings); {a.rounds} interleaved rounds; model: {a.rate / MB:g} MB/s per connection, "
        f"{a.rtt * 1000:.0f} ms per request; {os.cpu_count()} CPUs; MB = 10^6 bytes",
        flush=True,
    )
    t_start = time.monotonic()
    figures: dict[tuple[str, int, str, str], list[float]] = {}
    limit_runs: dict[tuple[str, int, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    peaks: dict[str, list[float]] = {}
    yard: list[tuple[float, float]] = []
    composes: list[float] = []
    limit_shard = sizes.total_bytes(a.limit_layer_size, a.padding_size) // max(ranks_list)
    with (
        tempfile.TemporaryDirectory(prefix="ckptbench-storage-bench-", dir=scratch()) as tmp,
        GcsEmulator(Path(tmp) / "emu") as emu,
    ):
        emu.create_bucket(BUCKET)
        emulator = emulator_pid()
        model = NetModel(emu.url, a.rate, a.rtt)
        shim = XmlMultipartShim(emu.url, scratch=tmp)
        with model.running(), shim.running(), contextlib.ExitStack() as stack:
            # The multipart scheme needs the XML API: the model in front of the shim.
            shim_model = NetModel(shim.url, a.rate, a.rtt)
            stack.enter_context(shim_model.running())
            conditions: dict[str, str] = {"bare": emu.url, "model": model.url}
            out = Path(tmp) / "r.json"
            for r in range(a.rounds):
                order = ("gcs", "gcsfs") if r % 2 == 0 else ("gcsfs", "gcs")
                for ranks in ranks_list:
                    for cond, url in conditions.items():
                        for backend in order:
                            cell = run(url, backend, ranks, a.layer_size, a.padding_size,
                                       a.samples, a.threads, out, emulator)  # fmt: skip
                            for op in ("save", "load"):
                                tp = float(cell[op]["throughput_bytes_per_second"])
                                figures.setdefault((cond, ranks, backend, op), []).append(tp)
                            cpu.setdefault((cond, backend), []).append(
                                (cell["io_seconds"], *cell["cpu"])
                            )
                            print(
                                f"  round {r + 1} {cond:5} {ranks} rank(s) {backend:5}: save "
                                f"{figures[(cond, ranks, backend, 'save')][-1] / MB:7.1f}, "
                                f"load {figures[(cond, ranks, backend, 'load')][-1] / MB:7.1f} "
                                "MB/s",
                                flush=True,
                            )
                # The limit: gcs under the model at a larger shard, each upload scheme, beside
                # one stream's yardstick.
                schemes = SCHEMES if r % 2 == 0 else SCHEMES[::-1]
                for ranks in ranks_list:
                    for scheme in schemes:
                        url = shim_model.url if scheme == "multipart" else model.url
                        cell = run(url, "gcs", ranks, a.limit_layer_size, a.padding_size,
                                   a.samples, a.threads, out, emulator, scheme)  # fmt: skip
                        for op in ("save", "load"):
                            tp = float(cell[op]["throughput_bytes_per_second"])
                            limit_runs.setdefault((scheme, ranks, op), []).append(tp)
                        cpu.setdefault(("limit", scheme), []).append(
                            (cell["io_seconds"], *cell["cpu"])
                        )
                yard.append(single_stream(model.url, limit_shard))
                print(
                    f"  round {r + 1} limit runs: "
                    + ", ".join(
                        f"{n} rank(s) {s} save {limit_runs[(s, n, 'save')][-1] / MB:.1f} load "
                        f"{limit_runs[(s, n, 'load')][-1] / MB:.1f}"
                        for n in ranks_list
                        for s in SCHEMES
                    )
                    + f" MB/s; one stream {yard[-1][0] / MB:.1f} up {yard[-1][1] / MB:.1f} down",
                    flush=True,
                )
                composes.append(compose_rate(emu.url, limit_shard))
                for backend in order:
                    peaks.setdefault(backend, []).append(
                        rss(emu.url, backend, a.rss_shard, a.threads)
                    )
        crc = crc_cost(emu.url, a.layer_size, max(1, a.padding_size // 2), a.rounds)

    print("\nthroughput (median [min-max] over rounds), gcs/gcsfs ratio of medians:")
    for cond in ("bare", "model"):
        for ranks in ranks_list:
            for op in ("save", "load"):
                ours = figures[(cond, ranks, "gcs", op)]
                theirs = figures[(cond, ranks, "gcsfs", op)]
                x = ratio(ours, theirs)
                print(
                    f"  {cond:5} {ranks} rank(s) {op}: gcs {med(ours)}  gcsfs {med(theirs)}  "
                    f"ratio {x:5.2f} (target >= 1.0: {'met' if x >= 1 else 'MISSED'})"
                )
    up = statistics.median(y[0] for y in yard)
    down = statistics.median(y[1] for y in yard)
    print(
        f"\nunder the model, {ranks_list[-1] * limit_shard / MB:.0f} MB in all: a single stream "
        f"(one request of {limit_shard / MB:.0f} MB, the largest rank count's shard) moved "
        f"{up / MB:.1f} MB/s up, {down / MB:.1f} down"
    )
    for ranks, scheme in ((n, s) for n in ranks_list for s in SCHEMES):
        limit = ranks * a.threads * a.rate
        for op, single in (("save", up), ("load", down)):
            got = limit_runs[(scheme, ranks, op)]
            frac, times = statistics.median(got) / limit, statistics.median(got) / (single * ranks)
            print(
                f"  {ranks} rank(s) gcs {scheme} {op}: {med(got)} = {frac:.2f} of the limit "
                f"{limit / MB:.0f} MB/s ({ranks} x {a.threads} streams; target >= 0.67: "
                f"{'met' if frac >= 0.67 else 'MISSED'}), {times:.1f} x a single stream per rank "
                f"(target >= 3: {'met' if times >= 3 else 'MISSED'})"
            )
    rate = statistics.median(composes)
    print(
        f"  the emulator composes at {rate / MB:.0f} MB/s [{min(composes) / MB:.0f}-"
        f"{max(composes) / MB:.0f}] (it copies every byte; GCS composes without copying): with "
        "that time taken out of each save, gcs compose save would reach"
    )
    for ranks in ranks_list:
        limit = ranks * a.threads * a.rate
        total = sizes.total_bytes(a.limit_layer_size, a.padding_size)
        seconds = total / statistics.median(limit_runs[("compose", ranks, "save")])
        # Counted as serial: fake-gcs-server creates objects under one global lock.
        rest = seconds - total / rate
        print(
            f"    {ranks} rank(s): {total / rest / limit:.2f} of the limit "
            f"({seconds:.2f} s a save, {seconds - rest:.2f} s of it composing)"
        )
    print(
        "\nCPU of the emulator and of the model's proxy (this process) per second of the ranks' "
        "timed I/O, median over runs (2.0 would be both cores):"
    )
    for (cond, backend), rows in sorted(cpu.items()):
        emu_rate = statistics.median(e / io for io, e, _ in rows)
        proxy_rate = statistics.median(q / io for io, _, q in rows)
        print(f"  {cond:5} {backend:5}: emulator {emu_rate:.2f}, proxy {proxy_rate:.2f}")
    print("\ncrc32c cost (1 rank, in process, bare emulator; median [min-max]):")
    for i, op in enumerate(("save", "load")):
        on = [x[i] for x in crc[True]]
        off = [x[i] for x in crc[False]]
        print(f"  {op}: checksums on {med(on)}, off {med(off)}: on/off {ratio(on, off):.2f}")
    print(
        f"\npeak RSS of one rank above its RSS once the state and the load template are built, "
        f"over a save and a load of a {a.rss_shard / MB:.0f} MB shard (4 tensors), / the shard "
        "(median [min-max]; target for gcs <= 1.5 x):"
    )
    for backend, ratios in sorted(peaks.items()):
        print(
            f"  {backend:5}: {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
        )
    print(f"\nbench took {time.monotonic() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
