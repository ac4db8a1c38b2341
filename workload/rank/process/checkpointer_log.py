"""DCP's checkpointer process logs into the rank's log, at the rank's level.

With ``save_mode`` process, torch 2.13.0 starts a checkpointer process per rank whose first act
sets the root logger to INFO with a stderr handler of its own (``torch_seam``,
``replace_checkpointer_logger_init``): a dozen INFO lines a save, in another format, between the
rank's lines. torch gives no argument or variable to change it, and the process runs none of the
rank's code before it, except one module: ``multiprocessing``'s spawn imports the parent's main
module in the child first, and a rank's main module is ``ckptbench.cli`` (``python -m
ckptbench.cli worker`` runs it as ``__mp_main__``; the image's ``ckptbench worker`` script imports
it). So:

- the rank, before its first process save, puts its level in :data:`CHECKPOINTER_LOG_ENV`
  (:func:`hand_down`), which the child inherits: the root logger's effective level (WARNING: a
  rank configures no logging), or INFO with ``ckptbench run --verbose``, which asks for every
  library line;
- ``ckptbench.cli``, imported in the child, finds the variable and calls :func:`install`, which
  has DCP's logger setup replaced by :func:`_rank_logging`: records at that level or above, as
  ``[rank N] checkpointer process: LEVEL logger: message`` on stderr (the rank's, inherited), with
  the storage libraries' known noise hidden as the rank hides it.

``ckptbench.cli`` imports this module only when the variable is set (in the child): it imports
torch, which the operator's image does not carry.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, MutableMapping

from ckptbench.workload.contract.names import CHECKPOINTER_LOG_ENV
from ckptbench.workload.storage import noise, torch_seam


def level_for_checkpointer(environ: Mapping[str, str]) -> int:
    """The rank's level: every line with ``--verbose``, else what the rank's root logger passes."""
    if noise.verbose(environ):
        return logging.INFO
    return logging.getLogger().getEffectiveLevel()


def hand_down(environ: MutableMapping[str, str]) -> None:
    """In the rank, before its checkpointer process starts: the level that process logs at."""
    environ[CHECKPOINTER_LOG_ENV] = logging.getLevelName(level_for_checkpointer(environ))


def install_from(environ: Mapping[str, str]) -> bool:
    """In a process the rank started: when it handed down a level, log at it. Whether it did."""
    name = environ.get(CHECKPOINTER_LOG_ENV, "").strip()
    if not name:
        return False
    level = logging.getLevelName(name.upper())
    install(level if isinstance(level, int) else logging.WARNING)
    return True


def install(level: int) -> None:
    torch_seam.replace_checkpointer_logger_init(lambda rank: _rank_logging(rank, level))


def _rank_logging(rank: int, level: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    prefix = f"[rank {rank}] checkpointer process:"
    handler.setFormatter(logging.Formatter(f"{prefix} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    noise.quiet_unless_verbose(os.environ)
