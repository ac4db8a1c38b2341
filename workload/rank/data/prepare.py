"""``prepare``: the dataset made once, by every rank together, and found again by later runs.

Rank 0 looks for the dataset's manifest. If it is there and describes this dataset, every rank
reuses it. Otherwise each rank writes every world_size-th file (timed: the preparation's own
figure, apart from the reading), and once all have, rank 0 writes the manifest last: a dataset
with a manifest is whole, and one without is made again from the start.
"""

from __future__ import annotations

import time

from pydantic import ValidationError

from ckptbench.workload.contract.data.config import DataConfig
from ckptbench.workload.contract.data.layout import Manifest
from ckptbench.workload.rank.data import content
from ckptbench.workload.rank.data.meeting import Meets
from ckptbench.workload.rank.data.store import Store


class DatasetError(RuntimeError):
    """A manifest that names another dataset, or cannot be read; the message says which."""


def _found(config: DataConfig, store: Store) -> bool:
    ds = config.dataset
    if not store.exists(ds.manifest_path):
        return False
    text = store.read(ds.manifest_path).decode()
    try:
        manifest = Manifest.model_validate_json(text)
    except ValidationError as exc:
        raise DatasetError(f"{ds.manifest_path}: not a ckptbench dataset manifest: {exc}") from exc
    if not manifest.matches(ds):
        raise DatasetError(
            f"{ds.manifest_path} describes another dataset ({manifest.model_dump(mode='json')}); "
            "remove it with 'ckptbench clean' or choose another dataPath"
        )
    return True


def prepare(config: DataConfig, store: Store, meeting: Meets) -> float | None:
    """Make sure the dataset is there; the seconds this rank spent writing it, None if reused."""
    ds = config.dataset
    if config.rank == 0:
        meeting.publish("dataset/found", _found(config, store))
    if meeting.read("dataset/found"):
        return None
    start = time.perf_counter()
    stored = 0
    for f in range(config.rank, ds.files, config.world_size):
        data = content.encode_file(ds, f)
        store.write(ds.file_path(f), data)
        stored += len(data)
    seconds = time.perf_counter() - start
    written = meeting.gather("dataset/written", [stored, seconds])
    if written:
        manifest = Manifest(
            format=ds.format,
            files=ds.files,
            samples_per_file=ds.samples_per_file,
            sample_bytes=ds.sample_bytes,
            seed=ds.seed,
            stored_bytes=sum(n for n, _ in written),
            prepare_seconds=round(max(s for _, s in written), 6),
        )
        store.write(ds.manifest_path, manifest.model_dump_json(indent=2).encode())
    meeting.barrier("dataset/manifest")
    return seconds
