"""Names shared across the workload's rooms and the operator: one definition each."""

from __future__ import annotations

# google-cloud-storage's own variable for an emulator's address; clients skip authentication then.
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"

# gcsfs turns on hierarchical-namespace probing by default, which the emulator does not answer;
# it reads this variable once, at import, so it must be set before gcsfs is imported.
GCSFS_HNS_FLAG = "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"

# The index an Indexed Job gives each pod: the rank, in a benchmark pod.
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"

# Set by `ckptbench run --verbose` for the ranks: they then show the storage libraries' known log
# noise (ckptbench.workload.storage.noise) instead of hiding it. Read by a rank, not a setting.
VERBOSE_LOGS_ENV = "CKPTBENCH_VERBOSE_LOGS"

# Set by a rank that saves with DCP's process checkpointer, for that process (which inherits it):
# the log level it logs at, the rank's own (ckptbench.workload.rank.process.checkpointer_log).
CHECKPOINTER_LOG_ENV = "CKPTBENCH_CHECKPOINTER_LOG_LEVEL"
