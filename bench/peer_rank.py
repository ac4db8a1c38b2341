"""One rank of bench_peer.py: a save and a cold load of the reference layout, ours or the peer's.

Run by bench_peer.py, one process per rank and per cell, never by hand. Both systems get the same
everything but the writer and reader: the reference state (``dummy_tensor_i``, tensor ``i`` on rank
``i % world``), built and verified by the workload's own code; a gloo process group; a barrier
before each timed call; the same thread count (ours: ``threads``; the peer: DCP's
``FileSystemWriter(thread_count=threads)``); a client made before the timings (ours by the storage
session, the peer's with as many pooled connections as its writer can use at once, so it never
queues for one). The load goes into a fresh template through a fresh reader after the save, in the
same process: neither system caches object bytes in process, so every byte comes from the
emulator. Prints one JSON line: the seconds of ``dcp.save`` and ``dcp.load`` on this rank, its
shard bytes, its peak RSS above its RSS once the state and the load template are built, and for
ours where the save's time went: the wall-clock span of its part uploads and its assembly
(composes and part deletes, or the multipart completion), from the save's start, out of
``trace_save.py``'s trace of our calls.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from procstat import reset_peak, vm
from trace_save import trace

PEER_PARTS_PER_FILE = 8  # the peer's upload_chunks_concurrently_from_bytesio max_workers


# Our calls whose spans say where a save went (``trace_save.trace``'s names), by kind.
_KINDS = {"upload": "upload", "put_part": "upload", "compose": "compose", "delete": "delete",
          "complete": "complete"}  # fmt: skip


def spans_of(log: list[tuple[float, float, str, str]]) -> dict[str, tuple[float, float]]:
    """Each kind's span (first start, last end) in a trace of our calls. Composite: ``upload``
    (parts), ``compose``, ``delete`` (parts); multipart: ``upload`` (parts), ``complete``."""
    spans: dict[str, tuple[float, float]] = {}
    for t0, t1, name, what in log:
        kind = _KINDS.get(name)
        if kind is None or (name in ("upload", "delete") and ".parts/" not in what):
            continue
        lo, hi = spans.get(kind, (t0, t1))
        spans[kind] = (min(lo, t0), max(hi, t1))
    return spans


def writer_and_reader(
    system: str, cid: str, threads: int, config: Any, items: int
) -> tuple[Any, Any]:
    """Factories of this system's DCP writer and reader; clients made here, before any timing.

    The peer's ``thread_count`` is ``min(threads, items)``: DCP's ``FileSystemWriter`` writes one
    file per thread, so with more threads than items the extra files are empty, and an empty file
    cannot be uploaded by the XML multipart upload (completing one needs at least one part: GCS's
    reference, and the shim, refuse it), so the published peer fails the save. The extra threads
    would have had nothing to write: the peer's transfers are the same either way."""
    if system != "peer":
        from ckptbench.workload.storage.session import open_session

        session = open_session(config)
        return (lambda: session.writer(cid)), (lambda: session.reader(cid))
    from peer_seam import peer_classes

    from ckptbench.workload.storage.gcs.client import make_client

    writer_cls, reader_cls = peer_classes()
    client = make_client(pool_size=threads * PEER_PARTS_PER_FILE + 4)
    bucket = cid.removeprefix("gs://").split("/", 1)[0]
    list(client.list_blobs(bucket, max_results=1))  # opens a connection, as our session does
    return (
        lambda: writer_cls(
            cid, "ckptbench", storage_client=client, thread_count=max(1, min(threads, items))
        ),
        lambda: reader_cls(cid, "ckptbench", storage_client=client),
    )


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--system", choices=("compose", "multipart", "peer"), required=True,
                   help="ours with that upload scheme, or the peer")  # fmt: skip
    p.add_argument("--cid", required=True, help="gs://bucket/prefix of this cell's checkpoint")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True, help="rank 0's rendezvous port")
    p.add_argument("--layer-size", type=int, required=True)
    p.add_argument("--padding-size", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    a = p.parse_args()

    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    from ckptbench.workload.contract.checkpoint import sizes
    from ckptbench.workload.contract.choices import Backend, Procedure
    from ckptbench.workload.contract.config import WorkloadConfig
    from ckptbench.workload.rank import state
    from ckptbench.workload.rank.process import memory

    warnings.simplefilter("ignore", UserWarning)
    # The allocator as the workload's ranks set it for their own procedure; the same for both
    # systems.
    memory.configure_allocator(Procedure.CKPTBENCH)
    config = WorkloadConfig(
        checkpoint_path=a.cid, backend=Backend.GCS, threads=a.threads, rank=a.rank,
        world_size=a.world, layer_size=a.layer_size, padding_size=a.padding_size,
        upload_scheme="compose" if a.system == "peer" else a.system,
    )  # fmt: skip
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world,
        timeout=timedelta(minutes=10),
    )  # fmt: skip
    log: list[tuple[float, float, str, str]] = []
    start = [0.0]
    if a.system != "peer":
        trace(log, start)
    sd = state.build_state(config)
    make_writer, make_reader = writer_and_reader(a.system, a.cid, a.threads, config, len(sd))
    template = state.empty_template(config)
    state.mark_unwritten(template)  # touches every page of the template before the baseline
    base = vm("VmRSS")
    reset_peak()  # VmHWM starts afresh from here
    dist.barrier()
    t_save = time.perf_counter()
    start[0] = t_save  # the trace's times are from the save's start
    dcp_save(sd, storage_writer=make_writer())
    save = time.perf_counter() - t_save
    dist.barrier()
    t0 = time.perf_counter()
    dcp_load(template, storage_reader=make_reader())
    load = time.perf_counter() - t0
    peak = vm("VmHWM") - base
    state.verify(template, config)  # raises, naming the tensors, if any byte differs
    dist.barrier()
    dist.destroy_process_group()
    shard = sizes.shard_bytes(a.rank, a.world, a.layer_size, a.padding_size)
    phases = spans_of(log)
    print(json.dumps({"save": save, "load": load, "shard": shard, "peak_above": peak,
                      "phases": phases}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
