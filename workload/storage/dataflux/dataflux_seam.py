"""The one place ckptbench reaches past gcs-torch-dataflux's public names (Google's connector).

Everything else imports the connector's public classes from here, so a version change is noticed
in one module. Written for :data:`WRITTEN_FOR`, where three things need help:

- The connector's ``multipart_upload/multipart.py`` imports
  ``_api_core_retry_to_resumable_media_retry`` from ``google.cloud.storage._helpers`` and
  ``google.cloud.storage.transfer_manager``, private helpers google-cloud-storage 3 removed (the
  project runs 3.x; 2.x had them), so the connector cannot be imported as published. The helper
  only turns an ``api_core`` retry into the ``google.resumable_media.RetryStrategy`` the connector
  puts on its upload parts. Before importing the connector, that helper is supplied, as
  google-cloud-storage 2.x defined it, where it is missing; with a 2.x install nothing changes.
- torch 2.13's ``FileSystemWriter`` closes each file's stream inside its ``with create_stream``
  block, so the connector's ``DatafluxCheckpointBuffer.close`` (which uploads, then closes the
  buffer) runs twice and the second call fails on the closed buffer ("I/O operation on closed
  file"): no save completes. A second close is made a no-op, as ``io.IOBase.close`` is; the first
  still uploads exactly as published.
- ``DataFluxIterableDataset`` checks, whenever compose is on, that its client may create and
  delete objects, with ``testIamPermissions``, which no GCS emulator implements (fake-gcs-server
  answers 404). Against an emulator (``STORAGE_EMULATOR_HOST`` set) the check is skipped
  (:func:`no_permission_check_on_an_emulator`); against GCS it runs as published.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from ckptbench.workload.contract.names import EMULATOR_ENV

WRITTEN_FOR = "1.4.0"
_HELPER = "_api_core_retry_to_resumable_media_retry"
# The connector's upload_chunks_concurrently_from_bytesio: each file's parts go up on this many
# threads at once (its max_workers default), so a client needs this many connections per file.
PARTS_PER_FILE = 8


class DatafluxMissing(ImportError):
    pass


def module(name: str, needed_by: str = "backend dataflux") -> Any:
    """``dataflux_pytorch.<name>``, with the retry helper supplied first; a clear error naming
    the extra when the connector is not installed."""
    _supply_retry_helper()
    try:
        return importlib.import_module(f"dataflux_pytorch.{name}")
    except ImportError as exc:
        raise DatafluxMissing(
            f"{needed_by} needs gcs-torch-dataflux (the 'dataflux' extra: pip install "
            f"-c constraints.txt -e '.[workload,dataflux]'): {exc}"
        ) from exc


def _retry_strategy(retry: Any, num_retries: int | None = None) -> Any:
    """google-cloud-storage 2.x's conversion of an api_core retry, for the connector's parts."""
    from google import resumable_media

    strategy: Any = resumable_media.RetryStrategy  # the package has no type hints
    if retry is not None and num_retries is not None:
        raise ValueError("num_retries and retry arguments are mutually exclusive")
    if retry is not None:
        return strategy(
            max_sleep=retry._maximum,
            max_cumulative_retry=getattr(retry, "_timeout", None) or retry._deadline,
            initial_delay=retry._initial,
            multiplier=retry._multiplier,
        )
    return strategy(max_retries=num_retries or 0)


def _supply_retry_helper() -> None:
    for name in ("google.cloud.storage._helpers", "google.cloud.storage.transfer_manager"):
        found = importlib.import_module(name)
        if not hasattr(found, _HELPER):
            setattr(found, _HELPER, _retry_strategy)


def _close_once(buffer: Any) -> None:
    if getattr(buffer.close, "_closes_once", False):
        return
    upload_and_close = buffer.close

    def close_once(self: Any) -> None:
        if not self.closed:
            upload_and_close(self)

    close_once._closes_once = True  # type: ignore[attr-defined]
    buffer.close = close_once


def checkpoint_classes() -> tuple[type[Any], type[Any], type[Any]]:
    """(``GCSDistributedWriter``, ``GCSDistributedReader``, ``DatafluxCheckpoint``): the
    connector's DCP writer and reader and its single-object checkpoint, ready to use."""
    checkpoint = module("dataflux_checkpoint")
    _close_once(checkpoint.DatafluxCheckpointBuffer)
    gcs_filesystem = module("lightning.gcs_filesystem")
    return (
        gcs_filesystem.GCSDistributedWriter,
        gcs_filesystem.GCSDistributedReader,
        checkpoint.DatafluxCheckpoint,
    )


def no_permission_check_on_an_emulator(dataset_module: Any) -> None:
    """Against an emulator, make ``DataFluxIterableDataset`` skip its ``testIamPermissions``."""
    if os.environ.get(EMULATOR_ENV) and not getattr(dataset_module, "_ckptbench_emulated", False):
        dataset_module._get_missing_permissions = lambda *args, **kwargs: []
        dataset_module._ckptbench_emulated = True
