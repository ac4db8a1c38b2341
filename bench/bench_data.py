"""Data loading on the small-file regime: ``dataflux`` vs ``gcs`` and ``gcsfs`` on the embedded GCS
emulator, ``s3`` vs ``s3fs`` on the embedded S3 server, each beside one stream of its server.

Prints, in one run, per server (fake-gcs-server, then moto's S3 server), on the bare server and
through :mod:`netmodel` (each connection capped at ``--rate`` bytes/s each way, default 20 MB/s;
``--rtt`` s added per request, default 20 ms), with the readers interleaved (A B C, C B A, ...)
over ``--rounds`` rounds; medians and spread [min-max] over the rounds:

1. samples/s and MiB/s of ``ckptbench data`` with each reader (map-style datasets, sharded by
   sample, dataflux's compose on: the connector's defaults) over the preset ``dataflux-100kib``
   (``--files`` raw files of 100 KiB, one sample each, batch 32, no emulated compute);
2. the ratios, median of the per-round ratios [min-max]: dataflux/gcs beside the connector's
   published figure (100 KiB x 500,000 files, 5 epochs: 1,299 s direct, 515 s DataFlux: 2.52x;
   the connector says 2-3x), dataflux/gcsfs and s3/s3fs (no published figure for those);
3. one stream: one client (google-cloud-storage, boto3), sequential whole GETs of the dataset's
   first ``--stream-objects`` objects, measured each round beside the readers; each reader's MiB/s
   as a multiple of it (above 1: the reader's parallelism paid);
4. under the model, the requests each run sent through it (each reader's reads went there, not
   around it) and the model's one-stream rate.

Each run is the real command line, ``ckptbench data --json`` in a subprocess, against one server
started here for the whole bench: ``--storage gs://bench/data`` with ``STORAGE_EMULATOR_HOST``
(``s3://bench/data`` with ``AWS_ENDPOINT_URL`` and moto's keys) naming the server or the model in
front of it. The dataset is made by a first, unmeasured run and found again by its manifest by
every later one, bare or modelled. (``--emulator`` would start a fresh emulator per run, so every
run would make the dataset again.)

The emulators, the model's proxy and the ranks share this machine's cores, and the emulators serve
from local memory or disk with no network in between: the bare figures compare the clients' costs
per request on this machine, not GCS's or S3's. Under the model a single stream is slow and every
request pays a round trip, as on the real services, so parallelism and fewer requests pay; it is
still a model, not the services.

Run: ``nice -n 10 .venv/bin/python bench/bench_data.py`` (two rounds: 7 minutes on a shared 2-core
machine at load average 6; ``--rounds 3`` 16.5 at load 12; ``--no-model`` for the bare servers
alone; ``--servers gcs`` or ``s3`` for one of them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from netmodel import NetModel

from ckptbench.workload.contract.names import EMULATOR_ENV
from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.local.s3_server import S3Server

MIB = 1024**2
MB = 1e6
BUCKET = "bench"
STORAGE_PREFIX = "data"
PRESET = "dataflux-100kib"
# The connector's DLIO-like run at 100 KiB x 500,000 files, 5 epochs (its README's table).
CLAIM_DIRECT_S, CLAIM_DATAFLUX_S = 1299.0, 515.0
CLAIM = (
    f"published: {CLAIM_DIRECT_S:,.0f} s direct / {CLAIM_DATAFLUX_S:,.0f} s DataFlux = "
    f"{CLAIM_DIRECT_S / CLAIM_DATAFLUX_S:.2f}x (100 KiB x 500,000 files; the connector says 2-3x)"
)


@dataclass(frozen=True)
class Server:
    """One storage service: its readers (the first is the baseline of every ratio) and how a
    run's environment names it."""

    name: str
    title: str
    scheme: str
    readers: tuple[str, ...]
    ratios: tuple[tuple[str, str, str], ...]  # (numerator, denominator, the published figure)
    stream_client: str


GCS = Server(
    "gcs",
    "the GCS emulator (fake-gcs-server)",
    "gs",
    ("dataflux", "gcs", "gcsfs"),
    (("dataflux", "gcs", CLAIM), ("dataflux", "gcsfs", "no published figure")),
    "google-cloud-storage",
)
S3 = Server(
    "s3",
    "the S3 server (moto)",
    "s3",
    ("s3", "s3fs"),
    (("s3", "s3fs", "no published figure"),),
    "boto3",
)
SERVERS = {s.name: s for s in (GCS, S3)}


@dataclass
class Figures:
    """One regime's measurements on one server, a list entry per round."""

    samples_per_second: dict[str, list[float]] = field(default_factory=dict)
    bytes_per_second: dict[str, list[float]] = field(default_factory=dict)
    requests: dict[str, list[int]] = field(default_factory=dict)
    stream_bytes_per_second: list[float] = field(default_factory=list)

    def add(self, reader: str, summary: dict[str, Any], requests: int | None) -> None:
        self.samples_per_second.setdefault(reader, []).append(summary["samples_per_second"])
        self.bytes_per_second.setdefault(reader, []).append(summary["bytes_per_second"])
        if requests is not None:
            self.requests.setdefault(reader, []).append(requests)


@dataclass(frozen=True)
class Regime:
    """Bare (the server itself) or the model (its proxy in front)."""

    name: str
    url: str
    model: NetModel | None


def spread(xs: Sequence[float], scale: float = 1.0, fmt: str = ".1f") -> str:
    """The median and [min-max] of ``xs`` divided by ``scale``."""
    lo, mid, hi = (v / scale for v in (min(xs), statistics.median(xs), max(xs)))
    return f"{mid:{fmt}} [{lo:{fmt}}-{hi:{fmt}}]"


def per_round_ratios(xs: Sequence[float], ys: Sequence[float]) -> list[float]:
    """Round by round: each round's two runs are neighbours in time, so their ratio is paired."""
    return [x / y for x, y in zip(xs, ys, strict=True)]


def interleaved(readers: Sequence[str], round_index: int) -> list[str]:
    """A B C in even rounds, C B A in odd ones: no reader always runs first or last."""
    return list(readers if round_index % 2 == 0 else readers[::-1])


def run_env(server: Server, url: str, started: GcsEmulator | S3Server) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if isinstance(started, S3Server):
        env.update(started.env())
        env["AWS_ENDPOINT_URL"] = url
        env.pop(EMULATOR_ENV, None)
    else:
        env[EMULATOR_ENV] = url
    env.pop("AWS_ENDPOINT_URL_S3", None)
    return env


def ckptbench_data(
    server: Server, reader: str, env: dict[str, str], a: argparse.Namespace, out: Path
) -> dict[str, Any]:
    """One ``ckptbench data`` run of one reader; its one cell's record, checked."""
    cmd = [
        sys.executable, "-m", "ckptbench.cli", "data",
        "--storage", f"{server.scheme}://{BUCKET}/{STORAGE_PREFIX}",
        "--backend", reader, "--preset", PRESET, "--files", str(a.files),
        "--world-size", str(a.ranks), "--json", str(out),
    ]  # fmt: skip
    if a.workers is not None:
        cmd += ["--workers", str(a.workers)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-4000:])
        raise SystemExit(f"ckptbench data failed (exit {proc.returncode}): {' '.join(cmd)}")
    doc = json.loads(out.read_text())
    [cell] = doc["runs"]
    summary = cell["summary"]
    if not (doc["ok"] and summary["verified"] and summary["samples"] == a.files):
        raise SystemExit(f"ckptbench data: reader {reader} did not verify every sample: {summary}")
    record: dict[str, Any] = cell
    return record


def object_names(server: Server, endpoint: str, started: GcsEmulator | S3Server,
                 prefix: str) -> list[str]:  # fmt: skip
    """The dataset's sample objects, in order, listed once by the plain client."""
    if isinstance(started, S3Server):
        s3 = boto3_client(endpoint, started)
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))
    client = gcs_client(endpoint)
    return sorted(b.name for b in client.list_blobs(BUCKET, prefix=prefix))


def gcs_client(endpoint: str) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project="bench",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": endpoint},
    )


def boto3_client(endpoint: str, started: S3Server) -> Any:
    import boto3

    env = started.env()
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name=env["AWS_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


def one_stream(endpoint: str, started: GcsEmulator | S3Server, names: Sequence[str]) -> float:
    """Bytes/s of one client reading ``names`` whole, one GET after another on one connection."""
    got = 0
    if isinstance(started, S3Server):
        s3 = boto3_client(endpoint, started)
        s3.head_bucket(Bucket=BUCKET)  # the connection is made before the clock starts
        t0 = time.perf_counter()
        for name in names:
            got += len(s3.get_object(Bucket=BUCKET, Key=name)["Body"].read())
    else:
        bucket = gcs_client(endpoint).bucket(BUCKET)
        bucket.blob(names[0]).reload()
        t0 = time.perf_counter()
        for name in names:
            got += len(bucket.blob(name).download_as_bytes())
    return got / (time.perf_counter() - t0)


@contextmanager
def serving(server: Server, a: argparse.Namespace, tmp: Path) -> Iterator[
    tuple[GcsEmulator | S3Server, list[Regime]]
]:  # fmt: skip
    """The server, its bucket, and the regimes to measure it in (the model's proxy running)."""
    with ExitStack() as stack:
        started: GcsEmulator | S3Server
        if server is GCS:
            started = stack.enter_context(GcsEmulator(tmp / "gcs"))
        else:
            started = stack.enter_context(S3Server())
        started.create_bucket(BUCKET)
        regimes = [Regime("bare", started.url, None)]
        if not a.no_model:
            model = stack.enter_context(NetModel(started.url, a.rate, a.rtt).running())
            regimes.append(Regime("model", model.url, model))
        yield started, regimes


def measure(server: Server, a: argparse.Namespace, tmp: Path) -> None:
    out = tmp / f"{server.name}.json"
    with serving(server, a, tmp) as (started, regimes):
        # An unmeasured first run makes the dataset; every measured run finds it.
        first = ckptbench_data(server, server.readers[-1], run_env(server, started.url, started),
                               a, out)  # fmt: skip
        dataset = first["settings"]["dataset"]
        prefix = f"{STORAGE_PREFIX}/datasets/{dataset}/data/"
        names = object_names(server, started.url, started, prefix)
        if len(names) != a.files:
            raise SystemExit(f"{server.name}: {len(names)} objects under {prefix}, not {a.files}")
        streamed = names[: a.stream_objects]
        settings = first["settings"]
        print(
            f"\n#### {server.title}: dataset {dataset} made in "
            f"{first['summary']['prepare_seconds']:.1f} s, then reused; {a.ranks} rank(s) x "
            f"{settings['accelerators_per_rank']} accelerator(s) x {settings['num_workers']} "
            f"worker(s), batch {settings['batch_size']}, sharding {settings['sharding']}, "
            f"{a.rounds} round(s)",
            flush=True,
        )
        results = {regime.name: Figures() for regime in regimes}
        for r in range(a.rounds):
            order = interleaved(server.readers, r)
            for regime in regimes:
                env = run_env(server, regime.url, started)
                for reader in order:
                    before = regime.model.requests if regime.model is not None else 0
                    cell = ckptbench_data(server, reader, env, a, out)
                    sent = regime.model.requests - before if regime.model is not None else None
                    results[regime.name].add(reader, cell["summary"], sent)
                    print(
                        f"  round {r + 1} {regime.name:5} {reader:8}: "
                        f"{cell['summary']['samples_per_second']:8.1f} samples/s "
                        f"{cell['summary']['bytes_per_second'] / MIB:7.2f} MiB/s",
                        flush=True,
                    )
                rate = one_stream(regime.url, started, streamed)
                results[regime.name].stream_bytes_per_second.append(rate)
                print(
                    f"  round {r + 1} {regime.name:5} one stream: {rate / MIB:7.2f} MiB/s",
                    flush=True,
                )
        for regime in regimes:
            report(server, regime, results[regime.name], a, len(streamed))


def report(server: Server, regime: Regime, f: Figures, a: argparse.Namespace,
           streamed: int) -> None:  # fmt: skip
    if regime.model is None:
        where = "BARE server (no network between client and server)"
    else:
        where = (
            f"UNDER THE MODEL ({a.rate / MB:g} MB/s per connection each way, "
            f"{a.rtt * 1000:g} ms per request)"
        )
    print(
        f"\n== {server.name} {regime.name}: {server.title}, {where}; {a.files} x 100 KiB, "
        f"medians [min-max] over {a.rounds} round(s)"
    )
    stream = f.stream_bytes_per_second
    for reader in server.readers:
        of_stream = statistics.median(f.bytes_per_second[reader]) / statistics.median(stream)
        line = (
            f"{reader:8}  {spread(f.samples_per_second[reader])} samples/s  "
            f"{spread(f.bytes_per_second[reader], MIB, '.2f')} MiB/s  "
            f"x one stream {of_stream:.2f}"
        )
        if reader in f.requests:
            line += f"  requests through the model {statistics.median(f.requests[reader]):.0f}"
        print(line)
    print(
        f"one stream ({server.stream_client}, {streamed} sequential GETs): "
        f"{spread(stream, MIB, '.2f')} MiB/s"
    )
    for top, bottom, claim in server.ratios:
        ratios = per_round_ratios(f.samples_per_second[top], f.samples_per_second[bottom])
        print(f"ratio {top}/{bottom} {regime.name}: {spread(ratios, fmt='.2f')}x  ({claim})")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    p.add_argument(
        "--files",
        type=int,
        default=512,
        help="100 KiB files in the dataset (the preset's laptop count)",
    )
    p.add_argument("--ranks", type=int, default=2, help="ckptbench data's --world-size")
    p.add_argument("--workers", type=int, help="DataLoader workers (default: the preset's 2)")
    p.add_argument(
        "--stream-objects", type=int, default=128, help="objects one stream reads each round"
    )
    p.add_argument("--servers", default="gcs,s3", help="comma list of gcs, s3")
    p.add_argument("--rate", type=float, default=20e6, help="model: bytes/s per connection")
    p.add_argument("--rtt", type=float, default=0.02, help="model: seconds added per request")
    p.add_argument("--no-model", action="store_true", help="bare servers only")
    p.add_argument("--timeout", type=float, default=900, help="seconds one run may take")
    a = p.parse_args(argv)
    servers = [s.strip() for s in a.servers.split(",") if s.strip()]
    unknown = [s for s in servers if s not in SERVERS]
    if unknown or not servers:
        p.error(f"--servers: {', '.join(unknown) or 'none given'}; choose from gcs, s3")
    for name in ("rounds", "files", "ranks", "stream_objects"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')}: must be at least 1")
    if a.rate <= 0 or a.rtt < 0:
        p.error("--rate must be positive and --rtt not negative")
    print(
        f"bench_data: preset {PRESET}, {a.files} files, {a.rounds} round(s), {a.ranks} rank(s), "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; MiB = 2^20 bytes, "
        "MB = 10^6",
        flush=True,
    )
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ckptbench-data-bench-") as tmp:
        for name in servers:
            measure(SERVERS[name], a, Path(tmp))
    print(
        f"\nbench_data: {time.monotonic() - t0:.0f} s in all, load average now "
        f"{os.getloadavg()[0]:.1f} (other work on this machine slows the runs it overlaps)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
