"""Under CI=true the image tests fail, not skip, when buildah or debootstrap is missing: CI's own
run installs both (.ci/run), so a missing one is a broken CI machine, not a reason to pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("ci", ["true", ""])
def test_image_tests_fail_under_ci_without_buildah(tmp_path: Path, ci: str) -> None:
    # A PATH holding neither tool (nor apt-get, with which the build script would install them).
    env = dict(os.environ, CI=ci, PATH=str(tmp_path))
    pytest_images = [sys.executable, "-m", "pytest", "--images", "-p", "no:cacheprovider", "-q"]
    result = subprocess.run(
        [*pytest_images, "tests/test_images.py", "-k", "test_image_holds_no_pip_or_setuptools"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    summary = result.stdout.strip().splitlines()[-1]
    if ci:
        assert result.returncode == 1, result.stdout[-3000:]
        assert "buildah is missing" in result.stdout and "2 errors" in summary, summary
    else:
        assert result.returncode == 0, result.stdout[-3000:]
        assert "2 skipped" in summary, summary
