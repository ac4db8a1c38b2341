"""What the S3 clients themselves hold in memory during a save and a load, per reader.

One process, one rank's state (``--tensors`` float32 tensors of ``--rows`` x 1000), saved and
loaded through ckptbench's storage session on the embedded S3 server (moto's), once per case:
backend ``s3`` with each ``s3Reader`` (dcp-optimized, ranged, sequential) and ``s3fs``. Each case
runs in a fresh process, so no case inherits another's heap or client pools. Printed per case, in
MiB and in shards: the save's peak above the resident state before it, what stays resident after
the save, and the load's peak above the process before it (the template is allocated untouched,
so the load's figure includes filling it: one shard of it is the template itself).

The peak is VmHWM, restarted before each operation (``procstat.reset_peak``). These are the
client's buffers, not a benchmark rank's whole peak (``bench_memory_plan.py`` measures that).

Run: ``.venv/bin/python bench/bench_s3_memory.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

MIB = 1024**2
CASES = (("s3", "dcp-optimized"), ("s3", "ranged"), ("s3", "sequential"), ("s3fs", None))


def one(backend: str, reader: str | None, rows: int, tensors: int) -> None:
    """Save and load one state in this process and print what each operation held."""
    import procstat
    import torch
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    from ckptbench.workload.contract.config import WorkloadConfig
    from ckptbench.workload.local.s3_server import S3Server
    from ckptbench.workload.storage.session import StorageSession

    warnings.simplefilter("ignore", UserWarning)
    with S3Server() as server:
        server.create_bucket("memory")
        os.environ.update(server.env())
        settings: dict[str, object] = {
            "checkpoint_path": "s3://memory/run",
            "backend": backend,
            "world_size": 1,
            "layer_size": rows,
            "padding_size": tensors,
        }
        if reader is not None:
            settings["s3_reader"] = reader
        session = StorageSession(WorkloadConfig.model_validate(settings))
        state = {f"t{i}": torch.rand(rows, 1000) for i in range(tensors)}
        shard = sum(t.numel() * t.element_size() for t in state.values())
        before = procstat.vm("VmRSS")
        procstat.reset_peak()
        dcp_save(state, storage_writer=session.writer("s3://memory/run/c"), no_dist=True)
        save_peak, after_save = procstat.vm("VmHWM") - before, procstat.vm("VmRSS") - before
        out = {k: torch.empty_like(v) for k, v in state.items()}
        before_load = procstat.vm("VmRSS")
        procstat.reset_peak()
        dcp_load(out, storage_reader=session.reader("s3://memory/run/c"), no_dist=True)
        load_peak = procstat.vm("VmHWM") - before_load
        if not all(torch.equal(out[k], v) for k, v in state.items()):
            raise SystemExit(f"{backend}: the load does not match the save")
        session.delete_prefix("s3://memory/run/c")

    def fmt(n: int) -> str:
        return f"{n / MIB:6.0f} MiB ({n / shard:.2f} shards)"

    name = backend + (f" {reader}" if reader else "")
    print(
        f"{name:18} shard {shard / MIB:.0f} MiB | save peak +{fmt(save_peak)} | kept after "
        f"save +{fmt(after_save)} | load peak +{fmt(load_peak)} (template included)",
        flush=True,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000, help="rows of each tensor (x 1000 floats)")
    p.add_argument("--tensors", type=int, default=4)
    p.add_argument("--case", help=argparse.SUPPRESS)  # one case, in a child process
    a = p.parse_args()
    if a.case:
        backend, _, reader = a.case.partition(":")
        one(backend, reader or None, a.rows, a.tensors)
        return 0
    for backend, reader in CASES:
        case = backend + (":" + reader if reader else "")
        args = ["--rows", str(a.rows), "--tensors", str(a.tensors), "--case", case]
        subprocess.run([sys.executable, __file__, *args], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
