"""The parity sweeps (examples/sweeps/, docs/parity.md) reproduce the grids they claim: each
validates as the API server and the operator see it, and its cells are the published grid's.

- s3torchbenchmarking's DCP grid (s3torchbenchmarking/conf/dcp.yaml): vit-base and T0_3B x world
  size 1, 2, 4, 8 x thread_count 1, 2, 4, 8, on s3 and on disk; weights only, fp32.
- the connector's single-file tables: 19.8 M, 77.9 M, 658 M and 6.5 B parameters, connector
  against gcsfs, one torch.save file from one process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ckptbench.operator.sweep import cells as sc
from ckptbench.operator.sweep.model import parse_sweep
from ckptbench.workload.contract.checkpoint import models
from tests.test_sweep_spec import refusals

SWEEPS = Path(__file__).resolve().parents[1] / "examples" / "sweeps"
# The connector's published model sizes (its singlenode README), parameters.
CONNECTOR_SIZES = (19.8e6, 77.9e6, 658e6, 6.5e9)


def _cells(name: str) -> list[Any]:
    (obj,) = [d for d in yaml.safe_load_all((SWEEPS / name).read_text()) if d]
    obj["metadata"].setdefault("namespace", "default")
    assert refusals(obj) == ("", [])
    return [cell.spec for cell in sc.expand(parse_sweep(obj["spec"]))]


@pytest.mark.parametrize(
    ("name", "backend", "threads"),
    [
        ("s3torchbenchmarking-dcp-s3.yaml", "s3", [1, 2, 4, 8]),
        ("s3torchbenchmarking-dcp-disk.yaml", "file", [1]),
    ],
)
def test_the_s3torchbenchmarking_grid(name: str, backend: str, threads: list[int]) -> None:
    specs = _cells(name)
    grid = {(s.model, s.world_size, s.s3_threads) for s in specs}
    s3_threads = threads if backend == "s3" else [1]  # the default where the axis is absent
    assert grid == {
        (m, w, t) for m in ("vit-base", "t0-3b") for w in (1, 2, 4, 8) for t in s3_threads
    }
    assert len(specs) == len(grid)
    for spec in specs:
        assert spec.backend == backend
        assert (spec.optimizer, spec.dtype) == (models.Optimizer.NONE, models.DtypeProfile.FP32)
        assert spec.sample_count == 4  # its epochs


def test_the_connector_single_file_tables() -> None:
    specs = _cells("dataflux-single-file.yaml")
    assert [s.backend for s in specs] == ["dataflux", "gcsfs"] * 4
    for spec in specs:
        assert spec.format == "torch-save" and spec.world_size == 1 and spec.sample_count == 10
    parameters = [s.layer_size * 1000 * s.padding_size for s in specs[::2]]
    for found, published in zip(parameters, CONNECTOR_SIZES, strict=True):
        assert found == pytest.approx(published, rel=0.01)
    # Both backends of a size hold the same state.
    assert all(
        (a.layer_size, a.padding_size) == (b.layer_size, b.padding_size)
        for a, b in zip(specs[::2], specs[1::2], strict=True)
    )
