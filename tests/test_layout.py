"""The layout rules a reader relies on: small modules, small folders, private names in seams only.

A newcomer follows the data path room by room; these checks keep a room from growing into a
second flat folder, and keep other libraries' private names where a version change is noticed.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("workload", "operator")
# A module over the limit is split by what its parts do, each named for that. Cutting off what
# spills over leaves a piece named for nothing but the room it left, read only with it.
MAX_MODULE_LINES = 450
MAX_MODULES_PER_FOLDER = 12

# One seam per library: the only modules allowed to name its private internals.
SEAMS = {
    "torch": "workload/storage/torch_seam.py",
    "google-cloud-storage": "workload/storage/gcs/google_seam.py",
    "s3torchconnector": "workload/storage/s3/s3torch_seam.py",
    "gcs-torch-dataflux": "workload/storage/dataflux/dataflux_seam.py",
}
# torch's private modules (torch.distributed._shard, checkpoint._fsspec_filesystem...) and the
# private members the project uses; google-cloud-storage's private client attributes. Public
# names a seam re-exports (narrow_tensor_by_index) may be used anywhere.
PRIVATE = {
    "torch": re.compile(
        r"torch(\.\w+)*\._\w+|\b_StorageInfo\b|\b_StorageReaderTransforms\b|\b_item_size\b|"
        r"\b_write_data\b"
    ),
    "google-cloud-storage": re.compile(r"\._http\b|\._connection\b|_connection\.\w+"),
    "s3torchconnector": re.compile(r"s3torchconnector(\.\w+)*\._\w+"),
    # The connector's private names, and google-cloud-storage 2.x's helper it imports.
    "gcs-torch-dataflux": re.compile(
        r"dataflux_pytorch(\.\w+)*\._\w+|\b_get_missing_permissions\b|"
        r"_api_core_retry_to_resumable_media_retry"
    ),
}


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_the_layout_has_modules_to_check() -> None:
    assert len(_modules()) > 40


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_the_line_limit(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {lines} lines"


def test_no_folder_holds_more_than_twelve_modules() -> None:
    folders = {p.parent for p in _modules()}
    crowded = {
        str(f.relative_to(ROOT)): n
        for f in folders
        if (n := len([m for m in f.glob("*.py") if m.name != "__init__.py"]))
        > MAX_MODULES_PER_FOLDER
    }
    assert not crowded


@pytest.mark.parametrize("library", sorted(SEAMS))
def test_private_names_of_a_library_live_only_in_its_seam(library: str) -> None:
    seam = ROOT / SEAMS[library]
    assert seam.exists(), f"the {library} seam moved: update SEAMS"
    assert PRIVATE[library].search(seam.read_text()), f"{seam.name} names nothing private"
    outside = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in _modules()
        if path != seam
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE[library].search(line)
    ]
    assert not outside, "\n".join(outside)


def test_every_package_folder_is_installed() -> None:
    """pyproject lists the packages by name (the symlinked layout defeats discovery), so a new
    folder left out of the list is missing from the wheel and the images: a rank there fails at
    import (it happened with rank/both/, runtime/data/ and storage/hf/)."""
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(("ckptbench", top, *init.parent.relative_to(ROOT / top).parts))
        for top in ("workload", "operator")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert sorted(found - listed) == []
