"""What ckptbench writes under a ``checkpointPath``, as names ``ckptbench clean`` may remove.

A run writes ``<run>/checkpoints/ckpt_<n>.ckpt/<DCP's files>`` and
``<run>/results/{rank-NNNNN,summary}.json`` (see ``WorkloadConfig.checkpoint_id`` and
``results_path``); the runner's storage check leaves ``.ckptbench-preflight-*`` beside the runs.
Nothing else under a prefix is ckptbench's, so nothing else is ever removed.

The folder given to clean may be the prefix, one run, its ``checkpoints`` folder or one
checkpoint: a name found under it is judged by the layout path it would have, seen from the
prefix (the folder's own last names are put in front of it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

CHECKPOINT = r"ckpt_\d+\.ckpt"
RESULT = r"(?:rank-\d+|summary)\.json(?:\.tmp)?"
# A path from the prefix: an optional run folder, then a checkpoint's file or a result; or the
# storage check's probe object.
_LAYOUT = re.compile(
    rf"^(?:[^/]+/)?(?:checkpoints/{CHECKPOINT}/.+|results/{RESULT})$"
    r"|^\.ckptbench-preflight-[0-9a-f]+$"
)
# How many of the folder's own last names may stand between the prefix and it.
_DEPTH = 2


def is_ours(name: str, folder_names: tuple[str, ...] = ()) -> bool:
    """Whether ``name`` (relative to a folder whose path ends in ``folder_names``) is a file a
    run of ckptbench wrote."""
    if not name or name.startswith("/") or ".." in name.split("/"):
        return False
    tail = list(folder_names[-_DEPTH:])
    return any(
        _LAYOUT.match("/".join([*tail[len(tail) - k :], name])) for k in range(len(tail) + 1)
    )


def local_files(root: Path) -> tuple[list[str], int]:
    """The names (relative to ``root``) of ckptbench's files under ``root``, and how many other
    entries were met (files outside the layout, folders not entered).

    Only folders that can still lead to the layout are entered, and no symbolic link is followed,
    so a wrong folder such as /usr costs a few directory reads, not a walk of its tree."""
    own = root.parts[1:]
    ours: list[str] = []
    others = 0
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(root / rel if rel else root))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_dir(follow_symlinks=False):
                if _may_lead(name, own):
                    stack.append(name)
                else:
                    others += 1
            elif is_ours(name, own):
                ours.append(name)
            else:
                others += 1
    return sorted(ours), others


def _may_lead(folder: str, own: tuple[str, ...]) -> bool:
    """Whether files of the layout can lie under ``folder`` (relative to the given root): it is
    a run, a ``checkpoints`` or ``results`` folder, a checkpoint, or a folder inside one."""
    below = ("x", "ckpt_0.ckpt/x", "checkpoints/ckpt_0.ckpt/x", "summary.json")
    return any(is_ours(f"{folder}/{rest}", own) for rest in below)
