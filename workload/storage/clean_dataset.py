"""``ckptbench clean <dataPath>/datasets/<name>``: remove one data-loading dataset by its manifest.

A dataset is removed by the names its manifest implies (its files, then nothing else), never by
listing and deleting its prefix: whatever else lies there stays. The manifest goes first, so a run
that starts meanwhile finds no whole dataset and does not read a half-deleted one; the files
follow. What could not be deleted is named.
"""

from __future__ import annotations

import sys

from pydantic import ValidationError

from ckptbench.workload.contract.data.layout import Dataset, Manifest
from ckptbench.workload.storage import objects

MANIFEST = "manifest.json"


class NotADataset(ValueError):
    """The folder holds no readable dataset manifest; the message says why."""


def is_dataset(url: str) -> bool:
    """Whether ``url`` names a dataset's folder (``.../datasets/<name>``)."""
    parts = url.rstrip("/").split("/")
    return len(parts) >= 2 and parts[-2] == "datasets"


def names_of(url: str, project: str | None) -> list[str]:
    """The dataset's names under ``url``, its manifest first, from the manifest."""
    try:
        text = objects.read_text(f"{url}/{MANIFEST}", project=project)
    except Exception as exc:
        raise NotADataset(f"no dataset manifest can be read there ({exc})") from exc
    try:
        manifest = Manifest.model_validate_json(text)
    except ValidationError as exc:
        raise NotADataset(f"{MANIFEST} is not a ckptbench dataset manifest: {exc}") from exc
    ds = Dataset(url, manifest.format, manifest.files, manifest.samples_per_file,
                 manifest.sample_bytes, manifest.seed)  # fmt: skip
    if url.rstrip("/").rsplit("/", 1)[-1] != ds.name:
        raise NotADataset(f"its manifest describes the dataset {ds.name}, not this folder")
    return [MANIFEST, *(f"data/{ds.file_name(i)}" for i in range(ds.files))]


def clean(url: str, project: str | None, dry_run: bool) -> int:
    try:
        names = names_of(url, project)
    except NotADataset as exc:
        print(f"ckptbench clean: {url}: {exc}; nothing deleted", file=sys.stderr)
        return 2
    if dry_run:
        print(f"{len(names)} object(s) of the dataset under {url} would be deleted")
        return 0
    # The manifest alone first: once it is gone no run takes the rest for a whole dataset.
    first = objects.delete_all(url, project=project, names=names[:1])
    rest = objects.delete_all(url, project=project, names=names[1:]) if not first.failed else None
    failed = first.failed + (rest.failed if rest is not None else names[1:])
    deleted = first.deleted + (rest.deleted if rest is not None else 0)
    print(f"deleted {deleted} object(s) of the dataset under {url}")
    if failed:
        shown = ", ".join(failed[:10]) + (" ..." if len(failed) > 10 else "")
        print(f"could not delete {len(failed)} object(s): {shown}", file=sys.stderr)
        return 1
    return 0
