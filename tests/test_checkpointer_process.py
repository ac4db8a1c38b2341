"""DCP's process checkpointer: the writer it receives pickled, its log lines, and the I/O it
times (docs/measurement.md, "Async saves")."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import torch
from torch.distributed.checkpoint import state_dict_saver

from ckptbench.workload.storage import timing, traffic
from ckptbench.workload.storage.file import backend as file_backend


def test_a_counted_file_writer_pickles_and_its_copy_counts_where_it_writes(
    tmp_path: Path,
) -> None:
    # The process checkpointer receives the writer pickled with every save: the byte counter's
    # lock made every process save on file, gcsfs and s3fs fail ("cannot pickle '_thread.lock'").
    writer = timing.timed_writer(
        traffic.count_traffic(file_backend.writer(str(tmp_path / "c"), 4000, 4000))
    )
    copy = pickle.loads(pickle.dumps(writer))
    before = traffic.TRAFFIC.sent
    with warnings.catch_warnings():  # "torch.distributed is disabled": one process here
        warnings.simplefilter("ignore", UserWarning)
        state_dict_saver.save({"t": torch.ones(1000)}, storage_writer=copy, no_dist=True)
    assert traffic.TRAFFIC.sent - before >= 4000
    assert (tmp_path / "c" / ".metadata").exists()
