"""s3 vs s3fs on the embedded S3 server (moto's), bare and under the network model, and
ckptbench's own overhead over calling s3torchconnector's DCP classes directly.

Prints, in one run, with the systems interleaved (A B A B ...) over ``--rounds`` rounds:

1. save and load throughput of ``ckptbench run`` with the s3 and s3fs backends, at 1 and 2 ranks,
   on the bare server and through :mod:`netmodel` (each connection capped at ``--rate`` bytes/s
   each way, default 5 MB/s; ``--rtt`` s added per request, default 20 ms); medians, spread
   (min-max) and s3/s3fs ratios; under the model, beside the model's single-stream rate;
2. overhead: one process, one rank, the same state, saved and loaded ``--overhead-rounds`` times
   on the bare server by s3torchconnector's ``S3StorageWriter``/``S3StorageReader`` as their
   authors show them (endpoint from ``AWS_ENDPOINT_URL``), and by ckptbench's storage session (the
   same classes, the client injected through the seam, the timing wrappers around them),
   interleaved; medians and ckptbench/bare ratios.

moto keeps objects in its own memory and serves them from Python: it, the model's proxy and the
ranks share this machine's cores. The figures compare the clients under a model; they are not S3's.

Run: ``.venv/bin/python bench/bench_s3.py`` (about 15 minutes on a 2-core machine; ``--padding-size
4`` for the 33 MB checkpoint of the earlier figures, about 6).
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
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from netmodel import NetModel
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.local.s3_server import S3Server
from ckptbench.workload.storage import timing
from ckptbench.workload.storage.s3 import s3torch_seam as seam
from ckptbench.workload.storage.session import StorageSession

MB = 1e6
BUCKET = "bench"
BACKENDS = ("s3", "s3fs")


def run(endpoint: str, server: S3Server, backend: str, ranks: int, a: argparse.Namespace,
        out: Path) -> dict[str, Any]:  # fmt: skip
    env = {**os.environ, **server.env(), "AWS_ENDPOINT_URL": endpoint, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable, "-m", "ckptbench.cli", "run",
        "--storage", f"s3://{BUCKET}/{backend}-{ranks}-{time.monotonic_ns()}",
        "--backend", backend, "--world-size", str(ranks),
        "--layer-size", str(a.layer_size), "--padding-size", str(a.padding_size),
        "--samples", str(a.samples), "--warmup", "0", "--json", str(out),
    ]  # fmt: skip
    if backend == "s3":
        cmd += ["--s3-threads", str(a.s3_threads), "--s3-part-size", str(a.s3_part_size)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"ckptbench run failed: {' '.join(cmd)}")
    [cell] = json.loads(out.read_text())["runs"]
    result: dict[str, Any] = cell
    return result


def single_stream(endpoint: str, server: S3Server, nbytes: int) -> tuple[float, float]:
    """Bytes/s of one PUT and one GET of ``nbytes`` through ``endpoint`` (one stream each)."""
    import boto3

    s3 = boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="k",
        aws_secret_access_key="s",
    )
    body = os.urandom(nbytes)
    t0 = time.perf_counter()
    s3.put_object(Bucket=BUCKET, Key="single-stream", Body=body)
    up = nbytes / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    s3.get_object(Bucket=BUCKET, Key="single-stream")["Body"].read()
    down = nbytes / (time.perf_counter() - t0)
    return up, down


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs) / MB:8.1f} MB/s [{min(xs) / MB:.1f}-{max(xs) / MB:.1f}]"


def ratio(xs: list[float], ys: list[float]) -> float:
    return statistics.median(xs) / statistics.median(ys)


def overhead(server: S3Server, rows: int, tensors: int, rounds: int) -> None:
    os.environ.update(server.env())
    state = {f"t{i}": torch.rand(rows, 1000) for i in range(tensors)}
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    config = WorkloadConfig.model_validate(
        {
            "checkpoint_path": f"s3://{BUCKET}/overhead",
            "backend": "s3",
            "world_size": 1,
            "layer_size": rows,
            "padding_size": tensors,
        }
    )
    session = StorageSession(config)
    times: dict[str, dict[str, list[float]]] = {
        k: {"save": [], "load": []} for k in ("bare", "ckptbench")
    }
    for r in range(rounds):
        for kind in ("bare", "ckptbench") if r % 2 == 0 else ("ckptbench", "bare"):
            cid = f"s3://{BUCKET}/overhead/{kind}-{r}"
            if kind == "bare":
                writer: Any = seam.S3StorageWriter("us-east-1", cid)
                reader: Any = seam.S3StorageReader("us-east-1", cid)
            else:
                writer = timing.timed_writer(session.writer(cid))
                reader = timing.timed_reader(session.reader(cid))
            t0 = time.perf_counter()
            dcp_save(state, storage_writer=writer, no_dist=True)
            times[kind]["save"].append(time.perf_counter() - t0)
            out = {k: torch.empty_like(v) for k, v in state.items()}
            t0 = time.perf_counter()
            dcp_load(out, storage_reader=reader, no_dist=True)
            times[kind]["load"].append(time.perf_counter() - t0)
            assert all(torch.equal(out[k], v) for k, v in state.items())
            session.delete_prefix(cid)
    print(f"\n== overhead: one rank, {nbytes / MB:.0f} MB in {tensors} tensors, {rounds} rounds")
    for op in ("save", "load"):
        bare, ours = times["bare"][op], times["ckptbench"][op]
        print(
            f"{op}: bare {statistics.median(bare):.3f} s [{min(bare):.3f}-{max(bare):.3f}]  "
            f"ckptbench {statistics.median(ours):.3f} s [{min(ours):.3f}-{max(ours):.3f}]  "
            f"ckptbench/bare {statistics.median(ours) / statistics.median(bare):.3f}"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--layer-size", type=int, default=2048, help="rows: 8.2 MB tensors")
    p.add_argument(
        "--padding-size", type=int, default=16, help="tensors in all: 131 MB, 8-16 parts a rank"
    )
    p.add_argument("--samples", type=int, default=1)
    p.add_argument("--rate", type=float, default=5e6, help="model: bytes/s per connection")
    p.add_argument("--rtt", type=float, default=0.02, help="model: seconds added per request")
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--overhead-rounds", type=int, default=6)
    p.add_argument("--s3-threads", type=int, default=1, help="backend s3's writer threads")
    p.add_argument("--s3-part-size", type=int, default=8 << 20, help="backend s3's part size")
    p.add_argument("--no-model", action="store_true", help="bare server only")
    p.add_argument("--overhead-only", action="store_true", help="part 2 alone")
    a = p.parse_args()
    warnings.simplefilter("ignore", UserWarning)
    ranks = [int(r) for r in a.ranks.split(",")]
    with S3Server() as server, tempfile.TemporaryDirectory() as tmp:
        server.create_bucket(BUCKET)
        model = NetModel(server.url, a.rate, a.rtt)
        regimes = [("bare", None)] + ([] if a.no_model else [("model", model)])
        if a.overhead_only:
            regimes = []
        for regime, proxy in regimes:
            ctx = proxy.running() if proxy is not None else None
            if ctx is not None:
                ctx.__enter__()
            endpoint = proxy.url if proxy is not None else server.url
            figures: dict[tuple[str, int], dict[str, list[float]]] = {}
            for r in range(a.rounds):
                order = BACKENDS if r % 2 == 0 else BACKENDS[::-1]
                for n in ranks:
                    for backend in order:
                        cell = run(endpoint, server, backend, n, a, Path(tmp) / "out.json")
                        got = figures.setdefault((backend, n), {"save": [], "load": []})
                        for op in ("save", "load"):
                            got[op].append(float(cell[op]["throughput_bytes_per_second"]))
            total = a.layer_size * 1000 * 4 * a.padding_size
            print(f"\n== {regime}: {total / MB:.0f} MB checkpoint, {a.rounds} rounds, medians "
                  "[min-max]")  # fmt: skip
            if proxy is not None:
                up, down = single_stream(endpoint, server, total // max(ranks))
                print(
                    f"model: {a.rate / MB:.1f} MB/s per stream, rtt {a.rtt * 1000:.0f} ms; one "
                    f"stream measured up {up / MB:.1f} MB/s, down {down / MB:.1f} MB/s"
                )
            for n in ranks:
                s3, s3fs = figures[("s3", n)], figures[("s3fs", n)]
                for op in ("save", "load"):
                    line = (f"{n} rank(s) {op}: s3 {med(s3[op])}  s3fs {med(s3fs[op])}  "
                            f"s3/s3fs {ratio(s3[op], s3fs[op]):.2f}")  # fmt: skip
                    if proxy is not None:
                        line += f"  s3/one-stream {statistics.median(s3[op]) / a.rate:.1f}"
                    print(line, flush=True)
            if ctx is not None:
                ctx.__exit__(None, None, None)
        overhead(server, a.layer_size, a.padding_size * 2, a.overhead_rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
