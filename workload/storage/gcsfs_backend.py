"""The fsspec backends' (gcsfs, s3fs) writers and readers: DCP's fsspec ones for format dcp,
DCP's Hugging Face ones for safetensors (storage/hf/object_store.py), and a reader naming damage.

DCP's fsspec reader fails on damaged data with torch's bare errors.
A truncated shard makes DCP's reader fail with a bare ``EOFError``, and a damaged one with torch's
"Weights only load failed ... Re-running with weights_only=False" (advice that would run the damaged
pickle and cure nothing). Both become an error naming the checkpoint.
"""

from __future__ import annotations

import pickle
import zipfile
from typing import Any

from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter
from torch.futures import Future

from ckptbench.workload.contract.choices import Format
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.storage.hf import object_store
from ckptbench.workload.storage.retry import IntegrityError
from ckptbench.workload.storage.torch_seam import FsspecReader, FsspecWriter
from ckptbench.workload.storage.traffic import count_traffic


def writer(
    config: WorkloadConfig, checkpoint_id: str, options: dict[str, Any], extensions: dict[str, Any]
) -> StorageWriter:
    """The writer of ``config.format`` through DCP's fsspec file system made with ``options``."""
    if config.format is Format.SAFETENSORS:
        return object_store.writer(checkpoint_id, options, config.sync_files)
    made = FsspecWriter(checkpoint_id, sync_files=config.sync_files, **options, **extensions)
    return count_traffic(made)


def reader(
    config: WorkloadConfig, checkpoint_id: str, fs: Any, options: dict[str, Any]
) -> StorageReader:
    """The reader of ``config.format``: safetensors' reads ``fs`` (the session's gcsfs or s3fs)
    and counts its own bytes; DCP's fsspec reader makes its own from ``options``."""
    if config.format is Format.SAFETENSORS:
        return object_store.RangedSafetensorsReader(checkpoint_id, fs)
    return count_traffic(NamingFsspecReader(checkpoint_id, **options))


class NamingFsspecReader(FsspecReader):
    def __init__(self, checkpoint_id: str, **storage_options: Any) -> None:
        super().__init__(checkpoint_id, **storage_options)
        self._checkpoint = checkpoint_id

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        try:
            return super().read_data(plan, planner)
        except (EOFError, pickle.UnpicklingError, zipfile.BadZipFile) as exc:
            raise self._damaged(exc) from None
        except RuntimeError as exc:
            if "PytorchStreamReader" not in str(exc):
                raise
            raise self._damaged(exc) from None

    def _damaged(self, exc: BaseException) -> IntegrityError:
        return IntegrityError(
            f"{self._checkpoint}: a data file is truncated or corrupted: torch.load failed "
            f"with {type(exc).__name__}"
        )
