"""The ranks' meeting points, on rank 0's TCP store: no process group is formed, so the libraries
that shard by torch.distributed's rank (s3torchconnector's iterable dataset) shard over a rank's
own loader workers only, as ckptbench deals the files itself."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from ckptbench.workload.contract.data.config import DataConfig
from ckptbench.workload.rank import rendezvous


class Meets(Protocol):
    """Where ranks meet: the data ranks' TCP store (:class:`Meeting`), or a checkpoint rank's
    process group when its training step reads from the loader (rank/both/loader.py)."""

    def barrier(self, name: str) -> None: ...
    def publish(self, key: str, value: object) -> None: ...
    def read(self, key: str) -> Any: ...
    def gather(self, name: str, value: object) -> list[Any]: ...


class Meeting:
    def __init__(self, config: DataConfig, log: Callable[[str], None]) -> None:
        self.rank, self.ranks = config.rank, config.world_size
        self.store: Any = rendezvous.meet(config, log=log)

    def barrier(self, name: str) -> None:
        """Return once every rank has reached ``name``."""
        self.store.set(f"{name}/{self.rank}", "1")
        self.store.wait([f"{name}/{r}" for r in range(self.ranks)])

    def publish(self, key: str, value: object) -> None:
        self.store.set(key, json.dumps(value))

    def read(self, key: str) -> Any:
        """What rank 0 (or any rank) published under ``key``; waits for it."""
        self.store.wait([key])
        return json.loads(self.store.get(key).decode())

    def gather(self, name: str, value: object) -> list[Any]:
        """Every rank's ``value`` on rank 0, in rank order ([] on the others). Only rank 0 waits:
        it hosts the store, and a rank still waiting on it when rank 0 ends would fail."""
        self.publish(f"{name}/{self.rank}", value)
        if self.rank != 0:
            return []
        return [self.read(f"{name}/{r}") for r in range(self.ranks)]
