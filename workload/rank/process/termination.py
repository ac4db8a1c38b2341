"""A rank's compact result where Kubernetes looks for it: the container's termination log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def write_termination_log(path: str | None, text: str, say: Callable[[str], None]) -> bool:
    """Write ``text`` to the termination log at ``path``; say why when it cannot be written."""
    if not path:
        return False
    where = Path(path)
    # Kubernetes creates the file; outside a pod, do not create files under /dev.
    if not where.exists() and (where.parent == Path("/dev") or not where.parent.is_dir()):
        return False
    try:
        where.write_text(text)
    except OSError as exc:
        say(f"warning: cannot write the termination log {where}: {exc}")
        return False
    return True
