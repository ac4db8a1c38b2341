"""The data procedure's use of gcs-torch-dataflux: its DataFlux datasets, built through their
published constructors (the connector's private names stay in its seam,
:mod:`ckptbench.workload.storage.dataflux.dataflux_seam`), and the two things they cannot be told.

- ``DataFluxIterableDataset`` checks, whenever compose is on, that its client may create and
  delete objects, with ``testIamPermissions``, which no GCS emulator implements: the seam skips
  that check against an emulator.
- The iterable dataset deals its listing among its loader's workers but not among ranks: each
  accelerator's dataset is narrowed to its own files by setting its ``objects`` (the listing it
  made, a public attribute) before iterating.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ckptbench.workload.storage.dataflux import dataflux_seam


def _module(name: str) -> Any:
    return dataflux_seam.module(name, needed_by="reader dataflux")


def _config(module: Any, prefix: str, compose: bool) -> Any:
    # Sorted, so every rank maps an index to the same object; one listing process, since every
    # rank lists and a rank's cores belong to its loaders.
    return module.Config(
        prefix=prefix, sort_listing_results=True, num_processes=1, disable_compose=not compose
    )


def map_dataset(project: str | None, bucket: str, prefix: str, compose: bool) -> Any:
    """A ``DataFluxMapStyleDataset`` of the objects under ``prefix`` (it lists them now)."""
    module = _module("dataflux_mapstyle_dataset")
    return module.DataFluxMapStyleDataset(
        project_name=project, bucket_name=bucket, config=_config(module, prefix, compose)
    )


def iterable_dataset(project: str | None, bucket: str, prefix: str, compose: bool) -> Any:
    """A ``DataFluxIterableDataset`` of the objects under ``prefix`` (it lists them now)."""
    module = _module("dataflux_iterable_dataset")
    dataflux_seam.no_permission_check_on_an_emulator(module)
    return module.DataFluxIterableDataset(
        project_name=project, bucket_name=bucket, config=_config(module, prefix, compose)
    )


def listed(dataset: Any) -> list[tuple[str, int]]:
    """The (name, size) of each object the dataset listed, in its index order."""
    return [(str(name), int(size)) for name, size in dataset.objects]


def narrow(dataset: Any, objects: Sequence[tuple[str, int]]) -> None:
    """Make an iterable dataset read only ``objects`` (its workers still share them out)."""
    dataset.objects = list(objects)


def fetch(dataset: Any, indices: Sequence[int]) -> list[bytes]:
    """A map dataset's objects at ``indices``: one batched download, composed when compose is on
    (what a DataLoader's fetcher calls)."""
    return [bytes(b) for b in dataset.__getitems__(list(indices))]
