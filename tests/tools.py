"""Outside tools some tests run (helm, prometheus): found, or the test fails under CI and skips
elsewhere, so a CI machine without the tool cannot pass by skipping."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def find_tool(name: str, missing: str, *local: Path) -> str:
    """The path of ``name``: the first of ``local`` that exists, else the one on PATH. ``missing``
    says why it is not there and how to install it."""
    for candidate in local:
        if candidate.exists():
            return str(candidate)
    on_path = shutil.which(name)
    if on_path:
        return on_path
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(missing)
    pytest.skip(missing)
