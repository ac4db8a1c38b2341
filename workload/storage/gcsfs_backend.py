"""DCP's fsspec reader over gcsfs, with damaged data named instead of torch's bare errors.

A truncated shard makes DCP's reader fail with a bare ``EOFError``, and a damaged one with torch's
"Weights only load failed ... Re-running with weights_only=False" (advice that would run the damaged
pickle and cure nothing). Both become an error naming the checkpoint.
"""

from __future__ import annotations

import pickle
import zipfile
from typing import Any

from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner
from torch.futures import Future

from ckptbench.workload.storage.retry import IntegrityError
from ckptbench.workload.storage.torch_seam import FsspecReader


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
