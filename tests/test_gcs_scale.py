"""Any tensor count: composite components are counted from the parts actually written."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from google.cloud import storage
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.storage.gcs.backend import GcsStorageReader, GcsStorageWriter
from ckptbench.workload.storage.gcs.objects import GcsObjects
from ckptbench.workload.storage.gcs.upload import MAX_COMPONENTS

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("quiet_dcp")]


def count_parts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    parts: list[str] = []
    original = GcsObjects.upload

    def spy(self: GcsObjects, name: str, data: Any) -> int | None:
        if ".parts/" in name:
            parts.append(name)
        return original(self, name, data)

    monkeypatch.setattr(GcsObjects, "upload", spy)
    return parts


def round_trip(sd: dict[str, torch.Tensor], cid: str, part_size: int) -> dict[str, torch.Tensor]:
    """Saves ``sd`` with our writer, and loads it back with our reader into zeroed tensors."""
    dcp_save(sd, storage_writer=GcsStorageWriter(cid, threads=4, part_size_bytes=part_size))
    loaded = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp_load(loaded, storage_reader=GcsStorageReader(cid, threads=4, part_size_bytes=part_size))
    return loaded


def test_ten_thousand_tensors_in_one_rank_round_trip(
    gcs_client: storage.Client, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = count_parts(monkeypatch)
    sd = {f"t{i}": torch.arange(i, i + 16, dtype=torch.float32) for i in range(10_000)}
    cid = f"gs://{gcs_bucket}/many/ckpt.ckpt"
    loaded = round_trip(sd, cid, 1 << 20)
    assert 0 < len(set(parts)) <= MAX_COMPONENTS  # only the save uploads parts
    assert all(torch.equal(loaded[k], v) for k, v in sd.items())


def test_tails_are_gathered_once_short_parts_would_pass_the_component_limit(
    gcs_client: storage.Client, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 300 tensors of 150 KB with 32 KiB parts: the part grows to fit the shard in ~1000 full
    # parts, and each tensor's tail could add a short part: 1,300 in all, were they not
    # gathered.
    parts = count_parts(monkeypatch)
    gen = torch.Generator().manual_seed(5)
    sd = {f"t{i}": torch.rand(37_500, generator=gen) for i in range(300)}
    cid = f"gs://{gcs_bucket}/tails/ckpt.ckpt"
    loaded = round_trip(sd, cid, 32 << 10)
    assert 900 < len(set(parts)) <= MAX_COMPONENTS
    assert all(torch.equal(loaded[k], v) for k, v in sd.items())
