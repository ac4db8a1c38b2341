"""What an async save's stall is made of: the staging copy, into fresh or into reused memory.

``bench_async.py`` runs the ckptbench procedure, whose every sample saves a state it has just
loaded into new tensors: DCP's ``DefaultStager``, which keeps its staging buffers for the tensors
it staged before, never sees the same tensors twice there, so each stall is a first save's. A
training job saves the same parameter tensors every time. This bench measures both in one
process (one rank, gloo, one intra-op thread as a ckptbench rank on a 2-core node has), rounds
interleaved:

- the floors: the shard copied into touched memory and into fresh memory (``torch.empty``, page
  faults included);
- ``async_save``'s stall (the call to its return) with the thread and the process checkpointer,
  the blocking stager and ``DefaultStager``, on a new state each save (the procedure's case) and
  on the same state every save (training's; the first save of each round, which stages into
  fresh buffers, is left out).

The issue's target: the process checkpointer with the best CPU stager stalls at most 1.5 x the
memory-copy floor.

Run: ``.venv/bin/python bench/bench_stall.py [--rows 10000] [--tensors 4] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_saver import (
    AsyncCheckpointerType,
    AsyncSaveResponse,
    async_save,
)

MIB = 1024**2


def _state(rows: int, tensors: int) -> dict[str, torch.Tensor]:
    return {f"t{i}": torch.rand(rows, 1000) for i in range(tensors)}


def _floors(state: dict[str, torch.Tensor]) -> tuple[float, float]:
    touched = {k: torch.empty_like(v) for k, v in state.items()}
    for k, v in state.items():
        touched[k].copy_(v)
    t0 = time.perf_counter()
    for k, v in state.items():
        touched[k].copy_(v)
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    fresh = [torch.empty_like(v).copy_(v) for v in state.values()]
    cold = time.perf_counter() - t0
    del fresh
    return warm, cold


def _stalls(
    kind: AsyncCheckpointerType,
    stager: Callable[[], Any],
    same_state: bool,
    a: argparse.Namespace,
    folder: Path,
) -> list[float]:
    """The stall of ``a.saves`` async saves, the first left out when the state is the same."""
    stalls = []
    the_stager = stager()
    state = _state(a.rows, a.tensors)
    try:
        for i in range(a.saves + (1 if same_state else 0)):
            if not same_state:
                state = _state(a.rows, a.tensors)
            writer = FileSystemWriter(str(folder / f"{kind.value}-{time.monotonic_ns()}-{i}"))
            t0 = time.perf_counter()
            result = async_save(
                state, storage_writer=writer, async_checkpointer_type=kind, async_stager=the_stager
            )
            stalls.append(time.perf_counter() - t0)
            upload = result.upload_completion if isinstance(result, AsyncSaveResponse) else result
            upload.result()
    finally:
        if the_stager is not None:
            the_stager.close()
    return stalls[1:] if same_state else stalls


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000, help="rows of each tensor (x 1000 floats)")
    p.add_argument("--tensors", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--saves", type=int, default=3, help="saves a case makes in a round")
    a = p.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        dist.init_process_group(
            "gloo", init_method=f"file://{folder / 'store'}", rank=0, world_size=1
        )
        stagers: dict[str, Callable[[], Any]] = {
            "blocking": lambda: None,
            "default": lambda: DefaultStager(StagingOptions(False, False, False, False)),
            "default+shm": lambda: DefaultStager(StagingOptions(False, True, False, False)),
        }
        cases = [
            (kind, name, same)
            for kind in (AsyncCheckpointerType.THREAD, AsyncCheckpointerType.PROCESS)
            for name in stagers
            for same in (False, True)
        ]
        floors: list[tuple[float, float]] = []
        got: dict[tuple[Any, str, bool], list[float]] = {c: [] for c in cases}
        for r in range(a.rounds):
            floors.append(_floors(_state(a.rows, a.tensors)))
            for case in cases if r % 2 == 0 else cases[::-1]:
                kind, name, same = case
                got[case] += _stalls(kind, stagers[name], same, a, folder)
        dist.destroy_process_group()
    shard = a.rows * 1000 * 4 * a.tensors
    warm = statistics.median(f[0] for f in floors)
    cold = statistics.median(f[1] for f in floors)
    print(
        f"shard {shard / MIB:.0f} MiB, one thread, {a.rounds} rounds x {a.saves} saves; floor: "
        f"touched memory {warm * 1000:.1f} ms, fresh memory {cold * 1000:.1f} ms"
    )
    print(f"{'checkpointer, stager, state':40} {'stall ms (median, min-max)':28} /floor  /fresh")
    for (kind, name, same), stalls in got.items():
        median = statistics.median(stalls)
        label = f"{kind.value}, {name}, {'same state' if same else 'new state each save'}"
        print(
            f"{label:40} {median * 1000:7.1f} ({min(stalls) * 1000:.1f}-{max(stalls) * 1000:.1f})"
            f"{'':9} {median / warm:6.2f} {median / cold:6.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
