"""The ``full`` strategy: the whole state gathered to rank 0 and saved as one object.

How most single-node and DDP jobs still checkpoint (PyTorch Lightning's non-sharded checkpoint,
Google's connector): ``torch.save(state, writer)`` into the backend's stream, ``torch.load`` back
from it. Rank 0 receives every other rank's tensors (the gather, timed as the save's planning),
then writes them (its I/O); on load rank 0 reads the object back alone, as a single-process job
resuming, and the other ranks wait for it.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.rank import state
from ckptbench.workload.storage import timing
from ckptbench.workload.storage.session import StorageSession
from ckptbench.workload.storage.traffic import TRAFFIC

OBJECT_NAME = "full.pt"


def object_url(checkpoint_id: str) -> str:
    return f"{checkpoint_id.rstrip('/')}/{OBJECT_NAME}"


def gather(config: WorkloadConfig, shard: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rank 0 receives every rank's tensors (by point-to-point sends, tensor by tensor, in index
    order); every rank returns what it holds afterwards: rank 0 the whole state, others theirs."""
    if config.world_size == 1 or not dist.is_initialized():
        return dict(shard)
    whole = config.whole()
    shape = state.tensor_shape(config)
    out: dict[str, torch.Tensor] = dict(shard) if config.rank == 0 else {}
    for i in whole.held_indices():
        owner = i % config.world_size
        name = state.tensor_name(i)
        if owner == 0:
            continue
        if config.rank == 0:
            received = torch.empty(shape, dtype=torch.float32)
            dist.recv(received, src=owner)
            out[name] = received
        elif config.rank == owner:
            dist.send(shard[name], dst=0)
    if config.rank == 0:
        return {state.tensor_name(i): out[state.tensor_name(i)] for i in whole.held_indices()}
    return out


def save(
    config: WorkloadConfig, session: StorageSession, checkpoint_id: str, shard: dict[str, Any]
) -> timing.Phases:
    """Gather (planning), then rank 0's ``torch.save`` into the backend's stream (I/O)."""
    phases = timing.Phases()
    t0 = time.perf_counter()
    whole = gather(config, shard)
    phases.planning = time.perf_counter() - t0
    t1 = time.perf_counter()
    if config.rank == 0:
        nbytes = state.tensor_bytes(whole)

        def write() -> None:
            with session.object_stream(object_url(checkpoint_id), "wb", nbytes) as stream:
                torch.save(whole, stream)

        session.retried(write, f"save of {object_url(checkpoint_id)}")
    phases.io = time.perf_counter() - t1
    return phases


def load(
    config: WorkloadConfig,
    session: StorageSession,
    checkpoint_id: str,
    template: dict[str, torch.Tensor],
) -> timing.Phases:
    """Rank 0 reads the object back with ``torch.load`` into ``template`` (emptied: the loaded
    tensors are the state, so rank 0 holds one copy of it, not two); the other ranks hold
    nothing and wait."""
    phases = timing.Phases(planning=0.0)
    t0 = time.perf_counter()
    if config.rank == 0:
        received = TRAFFIC.received

        def read() -> tuple[int, dict[str, torch.Tensor]]:
            with session.object_stream(object_url(checkpoint_id), "rb") as stream:
                stored = stream.seek(0, 2)  # the object's size: all of it is needed
                stream.seek(0)
                return stored, torch.load(stream, map_location="cpu", weights_only=True)

        stored, loaded = session.retried(read, f"load of {object_url(checkpoint_id)}")
        phases.read_bytes = TRAFFIC.received - received
        phases.needed_bytes = stored
        template.clear()
        template.update(loaded)  # verification then finds any tensor missing or wrong
    phases.io = time.perf_counter() - t0
    return phases
