"""Our gcs backend against the published peer (Google's Dataflux DCP writer/reader), in one run.

The peer (``gcs-torch-dataflux==1.4.0``, imported through ``peer_seam.py``; install the ``peer``
extra) uploads through the XML API's multipart upload, which fake-gcs-server lacks, so both
systems go through the same chain: emulator <- ``workload/local/loopback/xml_multipart.py``
shim <- [``netmodel``] <- ranks. Regimes (``--quick`` shrinks every shard 16 x, to check the bench
itself):

- ``bare-1``: the bare chain, 1 rank x 512 MiB (8 tensors of (16777, 1000) float32);
- ``bare-2``: the bare chain, 2 ranks x 153 MiB (4 tensors of (20054, 1000));
- ``model-2``: through netmodel, each connection capped at ``--rate`` bytes/s each way (default
  5 MB/s) and ``--rtt`` s added per request (default 20 ms), 2 ranks x 153 MiB.

Each cell (regime, system, round) is fresh rank processes (``peer_rank.py``) with a fresh prefix:
a barrier, a timed ``dcp.save``, a barrier, a timed cold ``dcp.load`` into a fresh template,
every tensor verified bit for bit, then the prefix deleted. The systems are ours with each upload
scheme (``compose``: parts composed; ``multipart``: GCS's XML multipart upload, through the shim
as the peer's) and the peer. Rounds interleave the systems, the order rotating from round to
round. Printed per regime: median save and load seconds and GB/s (total tensor bytes over the
slowest rank's seconds) with min-max, ratios of the medians' throughput (each of ours over the
peer, multipart over compose), and peak RSS per rank above its RSS once state and template are
built, over its shard bytes; where each of our saves' time went on its slowest rank. Last, the
cost of each system's final assembly of each regime's shard on the bare chain, which GCS charges
neither: the emulator's compose (ours) against the shim's completion of a multipart upload (the
peer's). A cell has a time bound (``--timeout``); a failure names the cell.

Run: ``.venv/bin/python bench/bench_peer.py`` (about 10 minutes on a quiet 2-core machine).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from emulator_in_memory import emulator_in_memory
from netmodel import NetModel
from peer_seam import peer_classes

from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.local.emulator import free_port
from ckptbench.workload.local.loopback.xml_multipart import XmlMultipartShim
from ckptbench.workload.storage.gcs.backend import part_size_for

GB = 1e9
MIB = 1 << 20
BUCKET = "bench"
HERE = Path(__file__).resolve().parent
# Ours with each upload scheme, and the peer.
SYSTEMS = ("compose", "multipart", "peer")
OURS = SYSTEMS[:2]


class BenchFailure(RuntimeError):
    """A step of the bench failed; the message says which, and why."""


@dataclass(frozen=True)
class Regime:
    name: str
    model: bool
    ranks: int
    layer_size: int
    padding_size: int

    def total(self) -> int:
        return sizes.total_bytes(self.layer_size, self.padding_size)


REGIMES = (
    Regime("bare-1", False, 1, 16777, 8),
    Regime("bare-2", False, 2, 20054, 4),
    Regime("model-2", True, 2, 20054, 4),
)


def run_cell(
    regime: Regime, system: str, url: str, threads: int, timeout: float, step: str
) -> list[dict[str, Any]]:
    """The ranks of one cell, each its own process; their JSON lines, or BenchFailure."""
    cid = f"gs://{BUCKET}/{system}-{regime.name}-{time.monotonic_ns()}"
    port = free_port()
    env = dict(os.environ, STORAGE_EMULATOR_HOST=url, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    procs = []
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        for rank in range(regime.ranks):
            out = (Path(tmp) / f"rank{rank}").open("w+")
            cmd = [sys.executable, str(HERE / "peer_rank.py"), "--system", system, "--cid", cid,
                   "--rank", str(rank), "--world", str(regime.ranks), "--port", str(port),
                   "--layer-size", str(regime.layer_size), "--padding-size",
                   str(regime.padding_size), "--threads", str(threads)]  # fmt: skip
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)  # fmt: skip
            procs.append((proc, out))
        deadline = time.monotonic() + timeout
        try:
            for rank, (proc, out) in enumerate(procs):
                left = max(1.0, deadline - time.monotonic())
                try:
                    proc.wait(timeout=left)
                except subprocess.TimeoutExpired:
                    raise BenchFailure(
                        f"{step}: rank {rank} gave no result after {timeout:.0f} s, stopped. "
                        f"Last output:\n{tail(out)}"
                    ) from None
                if proc.returncode != 0:
                    raise BenchFailure(
                        f"{step}: rank {rank} exited with {proc.returncode}. Last output:\n"
                        f"{tail(out)}"
                    )
            return [json.loads(tail(out).strip().splitlines()[-1]) for _, out in procs]
        finally:
            for proc, out in procs:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                out.close()
            delete_prefix(cid)


def tail(out: Any, chars: int = 3000) -> str:
    out.flush()
    out.seek(0)
    text: str = out.read()
    return text[-chars:]


def delete_prefix(cid: str) -> None:
    """Straight to the emulator (STORAGE_EMULATOR_HOST of this process), past shim and model."""
    from ckptbench.workload.storage.gcs.client import make_client

    prefix = cid.removeprefix(f"gs://{BUCKET}/") + "/"
    client = make_client(pool_size=4)
    for blob in client.list_blobs(BUCKET, prefix=prefix):
        blob.delete()
    client.close()


def probe_sizes(chosen: list[Regime]) -> list[int]:
    """The assembly probe's objects: one rank's shard of each regime chosen, once each."""
    return sorted({r.total() // r.ranks for r in chosen})


def parts_of(shard: int, threads: int) -> int:
    """How many full parts our upload cuts a ``shard``-byte stream into (its short parts, a
    tensor's tail and the framing, left out)."""
    return -(-shard // part_size_for(32 * MIB, shard, threads))


def request(url: str, method: str, path: str, body: bytes = b"") -> bytes:
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname or "", parsed.port, timeout=600)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        data = resp.read()
        if resp.status not in (200, 204):
            raise BenchFailure(f"assembly probe: {method} {path}: {resp.status} {data[:300]!r}")
        return data
    finally:
        conn.close()


def assembly_seconds(
    shim_url: str, nbytes: int, ours_parts: int, peer_part: int
) -> tuple[float, float]:
    """Seconds each system's final assembly of one ``nbytes`` object takes on the bare chain,
    which GCS charges neither: ours, the emulator's compose of ``ours_parts`` parts (it copies
    every byte); the peer's, the shim's completion of ``peer_part``-byte parts (it sends every
    byte to the emulator again)."""
    from ckptbench.workload.storage.gcs.client import make_client
    from ckptbench.workload.storage.gcs.objects import GcsObjects

    data = os.urandom(nbytes)
    emulator = os.environ["STORAGE_EMULATOR_HOST"]
    os.environ["STORAGE_EMULATOR_HOST"] = shim_url
    try:
        objects = GcsObjects(make_client(pool_size=4), BUCKET)
        step = -(-nbytes // ours_parts)
        names = [f"assembly/ours-{i:03d}" for i in range(ours_parts)]
        for i, name in enumerate(names):
            objects.upload(name, memoryview(data)[i * step : (i + 1) * step])
        t0 = time.perf_counter()
        objects.compose("assembly/ours", names)
        ours = time.perf_counter() - t0
        for name in [*names, "assembly/ours"]:
            objects.delete(name)
    finally:
        os.environ["STORAGE_EMULATOR_HOST"] = emulator
    path = f"/{BUCKET}/assembly/peer"
    answer = request(shim_url, "POST", path + "?uploads").decode()
    upload_id = answer.split("<UploadId>")[1].split("</UploadId>")[0]
    listed = []
    for n, lo in enumerate(range(0, nbytes, peer_part), 1):
        part = data[lo : lo + peer_part]
        request(shim_url, "PUT", f"{path}?partNumber={n}&uploadId={upload_id}", part)
        etag = hashlib.md5(part).hexdigest()
        listed.append(f"<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>")
    body = f"<CompleteMultipartUpload>{''.join(listed)}</CompleteMultipartUpload>".encode()
    t0 = time.perf_counter()
    request(shim_url, "POST", f"{path}?uploadId={upload_id}", body)
    peer = time.perf_counter() - t0
    request(shim_url, "DELETE", f"/storage/v1/b/{BUCKET}/o/assembly%2Fpeer")
    return ours, peer


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):6.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--rate", type=float, default=5e6, help="model: bytes/s per connection")
    p.add_argument("--rtt", type=float, default=0.02, help="model: seconds added per request")
    p.add_argument("--regimes", default=",".join(r.name for r in REGIMES))
    p.add_argument("--quick", action="store_true", help="every shard 16 x smaller")
    p.add_argument("--timeout", type=float, default=600, help="seconds a cell may take")
    a = p.parse_args()
    peer_classes()  # refuses to start, saying how to install it, when the peer is missing
    chosen = [r for r in REGIMES if r.name in a.regimes.split(",")]
    if a.quick:
        chosen = [Regime(r.name, r.model, r.ranks, r.layer_size // 16, r.padding_size)
                  for r in chosen]  # fmt: skip
    print(
        f"ours (gcs backend) vs the peer (gcs-torch-dataflux 1.4.0), {a.threads} threads each, "
        "(the peer's thread_count capped at a rank's tensor count: see peer_rank.py); "
        f"{a.rounds} interleaved rounds; model: {a.rate / 1e6:g} MB/s per connection, "
        f"{a.rtt * 1000:.0f} ms per request; {os.cpu_count()} CPUs; GB = 10^9 bytes; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        flush=True,
    )
    seconds: dict[tuple[str, str, str], list[float]] = {}
    peaks: dict[tuple[str, str], list[float]] = {}
    phases: dict[str, list[dict[str, Any]]] = {}
    t_start = time.monotonic()
    with emulator_in_memory("ckptbench-peer-bench-", BUCKET) as (tmp, emu):
        shim = XmlMultipartShim(emu.url, scratch=tmp)
        with shim.running():
            model = NetModel(shim.url, a.rate, a.rtt)
            with model.running():
                run_rounds(chosen, a, shim.url, model.url, seconds, peaks, phases, t_start)
            assembly = {
                size: [assembly_seconds(shim.url, size, parts_of(size, a.threads), 32 * MIB)
                       for _ in range(a.rounds)]
                for size in probe_sizes(chosen)
            }  # fmt: skip
            if shim.uploads_open or shim.part_files():
                raise BenchFailure(f"the shim holds {shim.uploads_open} open upload(s)")
    report(chosen, seconds, peaks, a)
    report_phases(chosen, phases)
    print(
        "\nassembly of one shard on the bare chain, which GCS charges neither, median [min-max] s "
        f"over {a.rounds}: ours, the emulator composing our parts; the peer's, the shim "
        "completing 32 MiB parts"
    )
    for size, runs in assembly.items():
        ours_s, peer_s = [x[0] for x in runs], [x[1] for x in runs]
        print(
            f"  {size / MIB:.0f} MiB: ours ({parts_of(size, a.threads)} parts) {med(ours_s)} "
            f"({size / statistics.median(ours_s) / GB:.3f} GB/s); the peer's {med(peer_s)} "
            f"({size / statistics.median(peer_s) / GB:.3f} GB/s)"
        )
    print(f"\nbench took {time.monotonic() - t_start:.0f} s")
    return 0


def run_rounds(
    chosen: list[Regime],
    a: argparse.Namespace,
    bare: str,
    model: str,
    seconds: dict[tuple[str, str, str], list[float]],
    peaks: dict[tuple[str, str], list[float]],
    phases: dict[str, list[dict[str, Any]]],
    t_start: float,
) -> None:
    """Every cell, the systems interleaved and their order alternating from round to round."""
    for r in range(a.rounds):
        order = SYSTEMS[r % len(SYSTEMS) :] + SYSTEMS[: r % len(SYSTEMS)]
        for regime in chosen:
            for system in order:
                step = f"round {r + 1} {regime.name} {system}"
                url = model if regime.model else bare
                ranks = run_cell(regime, system, url, a.threads, a.timeout, step)
                for op in ("save", "load"):
                    slowest = max(float(x[op]) for x in ranks)
                    seconds.setdefault((regime.name, system, op), []).append(slowest)
                peaks.setdefault((regime.name, system), []).extend(
                    float(x["peak_above"]) / float(x["shard"]) for x in ranks
                )
                if system in OURS:  # where the slowest rank's save went
                    slowest_rank = max(ranks, key=lambda x: float(x["save"]))
                    phases.setdefault(f"{regime.name} {system}", []).append(
                        {"save": (0.0, float(slowest_rank["save"])), **slowest_rank["phases"]}
                    )
                got = [seconds[(regime.name, system, op)][-1] for op in ("save", "load")]
                print(
                    f"  {step}: save {got[0]:.2f} s, load {got[1]:.2f} s "
                    f"({time.monotonic() - t_start:.0f} s in)",
                    flush=True,
                )


def report_phases(chosen: list[Regime], phases: dict[str, list[dict[str, Any]]]) -> None:
    """Where our save's time went, on its slowest rank: spans from the save's start."""
    print("\nour saves on their slowest rank, median [min-max] s from the save's start:")
    for cell in (f"{regime.name} {system}" for regime in chosen for system in OURS):
        rows = phases[cell]

        def end(kind: str, rows: list[dict[str, Any]] = rows) -> str:
            return med([float(r[kind][1]) for r in rows if kind in r] or [float("nan")])

        def lasts(kind: str, rows: list[dict[str, Any]] = rows) -> str:
            spans = [float(r[kind][1]) - float(r[kind][0]) for r in rows if kind in r]
            return med(spans or [float("nan")])

        share = [
            (float(r["compose"][1]) - float(r["compose"][0])) / float(r["save"][1])
            for r in rows
            if "compose" in r
        ]
        if cell.endswith("multipart"):
            print(
                f"  {cell}: save {end('save')}; parts all uploaded at {end('upload')}; "
                f"completing {lasts('complete')}"
            )
            continue
        print(
            f"  {cell}: save {end('save')}; parts all uploaded at {end('upload')}; "
            f"composing {lasts('compose')} ({med(share or [float('nan')])} of the save); "
            f"deleting parts {lasts('delete')}"
        )


def report(
    chosen: list[Regime],
    seconds: dict[tuple[str, str, str], list[float]],
    peaks: dict[tuple[str, str], list[float]],
    a: argparse.Namespace,
) -> None:
    print("\nmedian [min-max] over rounds; GB/s = all ranks' tensor bytes / slowest rank's seconds")
    for regime in chosen:
        total = regime.total()
        shard = total / regime.ranks
        extra = (f", model limit {regime.ranks * a.threads * a.rate / GB:.2f} GB/s "
                 f"({regime.ranks} x {a.threads} streams)" if regime.model else "")  # fmt: skip
        print(f"{regime.name}: {regime.ranks} rank(s) x {shard / MIB:.0f} MiB{extra}")
        for op in ("save", "load"):
            tput: dict[str, list[float]] = {}
            for system in SYSTEMS:
                secs = seconds[(regime.name, system, op)]
                tput[system] = [total / s / GB for s in secs]
                print(f"  {op} {system:9}: {med(secs)} s   {med(tput[system])} GB/s")
            m = {s: statistics.median(tput[s]) for s in SYSTEMS}
            print(
                f"  {op} throughput ratios: compose/peer {m['compose'] / m['peer']:.2f}, "
                f"multipart/peer {m['multipart'] / m['peer']:.2f}, "
                f"multipart/compose {m['multipart'] / m['compose']:.2f}"
            )
        for system in SYSTEMS:
            ratios = peaks[(regime.name, system)]
            print(f"  peak RSS per rank / shard, {system:9}: {med(ratios)}")


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except BenchFailure as exc:
        sys.stderr.write(f"bench_peer FAILED: {exc}\n")
        raise SystemExit(2) from None
