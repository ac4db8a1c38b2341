"""The one place the data procedure touches gcs-torch-dataflux: its DataFlux datasets, built
through their published constructors, and the two things they cannot be told.

- ``DataFluxIterableDataset`` checks, whenever compose is on, that its client may create and
  delete objects, with ``testIamPermissions``, which no GCS emulator implements (fake-gcs-server
  answers 404). Against an emulator (``STORAGE_EMULATOR_HOST`` set) the check is skipped; against
  GCS it runs as published.
- The iterable dataset deals its listing among its loader's workers but not among ranks: each
  accelerator's dataset is narrowed to its own files by setting its ``objects`` (the listing it
  made, a public attribute) before iterating.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import Any

from ckptbench.workload.contract.names import EMULATOR_ENV

WRITTEN_FOR = "1.4.0"


class DatafluxMissing(ImportError):
    pass


def _module(name: str) -> Any:
    try:
        return importlib.import_module(f"dataflux_pytorch.{name}")
    except ImportError as exc:
        raise DatafluxMissing(
            "reader dataflux needs gcs-torch-dataflux (the 'dataflux' extra: pip install "
            f"-c constraints.txt -e '.[workload,dataflux]'): {exc}"
        ) from exc


def _no_permission_check_on_an_emulator(module: Any) -> None:
    if os.environ.get(EMULATOR_ENV) and not getattr(module, "_ckptbench_emulated", False):
        module._get_missing_permissions = lambda *args, **kwargs: []
        module._ckptbench_emulated = True


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
    _no_permission_check_on_an_emulator(module)
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
