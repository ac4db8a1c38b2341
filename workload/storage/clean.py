"""``ckptbench clean URL``: remove what dead runs left under a ``gs://``, ``s3://`` or ``file://``
prefix.

A run that was killed mid-save leaves its checkpoint objects, the temporary parts of its
composite uploads (``*.distcp.parts/...``) and, with the multipart upload scheme, unfinished XML
multipart uploads (parts no object listing shows, billed until aborted); nothing else ever removes
them. This deletes the files of ckptbench's run layout under the prefix (:mod:`.layout`), aborts
the unfinished multipart uploads among them, says how many, and names those it could not remove.

Given a data-loading dataset's folder (``<dataPath>/datasets/<name>``), it removes that dataset by
the names its manifest implies, never by its prefix.

It acts only on what ckptbench wrote: an empty or scheme-only URL, a whole bucket, a system
folder or a home folder is refused before anything is listed, files outside the layout are left
(and counted), and the folder it was given is never removed, only emptied of ckptbench's files.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ckptbench.workload.contract.data.layout import Dataset, Manifest
from ckptbench.workload.contract.storage_settings import bucket_problem
from ckptbench.workload.storage import layout, objects

# How long aborting one unfinished multipart upload may take, retries included.
ABORT_SECONDS = 60.0
EXIT_REFUSED = 2

# Folders of the system that no benchmark prefix is: refused as they are, and everything under
# the ones the system alone writes.
SYSTEM_FOLDERS = frozenset(
    ["/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
     "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys",
     "/tmp", "/usr", "/var", "/var/lib", "/var/log", "/var/tmp", "/workspace"]
)  # fmt: skip
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                "/sbin", "/sys", "/usr")  # fmt: skip


class Refused(ValueError):
    """The URL names no benchmark prefix; the message says why."""


@dataclass(frozen=True)
class Prefix:
    """A checked prefix: the URL to act on, and the names of its own folders (for the layout)."""

    url: str
    own: tuple[str, ...]
    root: Path | None = None  # the local folder, for file://

    @property
    def is_object_store(self) -> bool:
        return self.root is None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ckptbench clean",
        description="Delete the files ckptbench's runs left under a prefix (checkpoints and "
        "results of its run layout, unfinished multipart uploads); nothing else, and never the "
        "prefix itself. Given a data-loading dataset's folder (<dataPath>/datasets/<name>), "
        "delete that dataset by its manifest.",
    )
    parser.add_argument(
        "url",
        help="gs://bucket/prefix or s3://bucket/prefix (a prefix is required) or file:///path "
        "(a folder); s3:// goes to the endpoint AWS_ENDPOINT_URL names (default AWS), with the "
        "AWS standard credentials",
    )
    parser.add_argument("--project", default=None, help="GCP project for the storage client")
    parser.add_argument(
        "--dry-run", action="store_true", help="list what would be deleted, delete nothing"
    )
    return parser


def check(url: str) -> Prefix:
    """The prefix ``url`` names, or :class:`Refused` saying why it is no benchmark prefix."""
    if not url.strip():
        raise Refused("no URL: give gs://bucket/prefix, s3://bucket/prefix or file:///path")
    if url.startswith(("gs://", "s3://")):
        scheme = url[:5]
        bucket, _, prefix = url.removeprefix(scheme).partition("/")
        prefix = prefix.strip("/")
        if not bucket or not prefix:
            raise Refused(f"give {scheme}bucket/prefix; a whole bucket is never cleaned")
        problem = bucket_problem(url)
        if problem is not None:
            raise Refused(problem)
        return Prefix(f"{scheme}{bucket}/{prefix}", tuple(prefix.split("/")))
    scheme, sep, rest = url.partition("://")
    if sep and scheme != "file":
        raise Refused("use gs://, s3:// or file://")
    if sep and not rest:
        raise Refused("no path after file://")
    raw = rest if sep else url
    first = raw.split("/", 1)[0]
    if first.endswith(":"):
        raise Refused(f"{first!r} looks like a URL scheme without '//'")
    root = Path(raw).expanduser().resolve()
    why = why_system_folder(root)
    if why is not None:
        raise Refused(why)
    return Prefix(f"file://{root}", root.parts[1:], root)


def why_system_folder(path: Path) -> str | None:
    """Why the resolved ``path`` is no benchmark prefix (a system or home folder), or None.
    ``ckptbench run`` refuses the same folders, so that whatever it writes ``clean`` can remove."""
    text = str(path)
    if text in SYSTEM_FOLDERS:
        return f"{text} is a system folder, not a benchmark prefix"
    for tree in SYSTEM_TREES:
        if text.startswith(tree + "/"):
            return f"{text} lies under the system folder {tree}"
    if text in _homes():
        return f"{text} is a home folder, not a benchmark prefix"
    return None


def _homes() -> set[str]:
    homes = {str(Path.home().resolve())}
    for entry in pwd.getpwall():
        if entry.pw_dir and entry.pw_dir != "/":
            homes.add(os.path.realpath(entry.pw_dir))
    return homes


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        prefix = check(args.url)
    except Refused as exc:
        print(f"ckptbench clean: {args.url!r}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    url = prefix.url
    if is_dataset(url):
        status = clean_dataset(url, args.project, args.dry_run)
        if prefix.root is not None and not args.dry_run:
            _prune_empty(prefix.root)
        return status
    try:
        names, others = _names(prefix, args.project)
        if prefix.is_object_store:
            gcs, uploads = _unfinished(url, args.project)
            folder = "/".join(prefix.own) + "/"
            uploads = [
                (n, u) for n, u in uploads if layout.is_ours(n.removeprefix(folder), prefix.own)
            ]
        else:
            gcs, uploads = None, []
    except Exception as exc:
        print(f"ckptbench clean: cannot list {url}: {exc}", file=sys.stderr)
        return 1
    if not names and not uploads:
        if others:
            print(
                f"ckptbench clean: {url} holds {others} file(s), none of them ckptbench's run "
                "layout (<run>/checkpoints/ckpt_N.ckpt/..., <run>/results/*.json): refused, "
                "nothing deleted",
                file=sys.stderr,
            )
            return EXIT_REFUSED
        print(f"nothing of ckptbench's under {url}")
        return 0
    kept = f"; {others} other file(s) are not ckptbench's and stay" if others else ""
    if args.dry_run:
        for name in names:
            print(f"{url}/{name}")
        for name, upload_id in uploads:
            print(f"unfinished multipart upload {upload_id} of {name}")
        print(f"{len(names)} object(s) under {url} would be deleted{kept}")
        if uploads:
            print(f"{len(uploads)} unfinished multipart upload(s) would be aborted")
        return 0
    outcome = objects.delete_all(url, project=args.project, names=names)
    if prefix.root is not None:
        _prune(prefix.root, names)
    print(f"deleted {outcome.deleted} object(s) under {url}{kept}")
    status = 0
    if outcome.failed:
        shown = ", ".join(outcome.failed[:10]) + (" ..." if len(outcome.failed) > 10 else "")
        print(
            f"could not delete {len(outcome.failed)} object(s): {shown} "
            f"(first error: {outcome.first_error})",
            file=sys.stderr,
        )
        status = 1
    if uploads:
        left = _abort(url, gcs, uploads)
        print(f"aborted {len(uploads) - len(left)} unfinished multipart upload(s)")
        if left:
            print(f"could not abort the multipart uploads of: {', '.join(left)}", file=sys.stderr)
            status = 1
    return status


def _prune_empty(root: Path) -> None:
    """A removed dataset's folders, once empty (its data/ folder, then its own)."""
    for folder in (root / "data", root):
        with contextlib.suppress(OSError):
            folder.rmdir()


def _names(prefix: Prefix, project: str | None) -> tuple[list[str], int]:
    """ckptbench's names under the prefix, and how many other entries it holds (local: those
    met on the way, since no other folder is entered)."""
    if prefix.root is not None:
        if not prefix.root.is_dir():
            return [], 0
        return layout.local_files(prefix.root)
    every = objects.list_names(prefix.url, project=project)
    ours = [n for n in every if layout.is_ours(n, prefix.own)]
    return ours, len(every) - len(ours)


def _prune(root: Path, names: list[str]) -> None:
    """Remove the folders the deleted files leave empty, deepest first, never ``root``."""
    folders = {parent for name in names for parent in (root / name).parents if parent != root}
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        # One that is not empty holds something that is not ckptbench's, and stays.
        if root in folder.parents:
            with contextlib.suppress(OSError):
                folder.rmdir()


def _unfinished(url: str, project: str | None) -> tuple[Any, list[tuple[str, str]]]:
    """The store's handle and the unfinished multipart uploads under ``url`` (none on GCS where
    the server has no XML API, as on an emulator). GCS names them by full object name, S3 (as
    its listing does) relative to ``url``."""
    if objects.is_s3(url):
        from ckptbench.workload.storage.s3 import objects as s3_objects

        return None, s3_objects.unfinished_uploads(url)
    from ckptbench.workload.storage.gcs.client import make_client, split_gs_url
    from ckptbench.workload.storage.gcs.multipart import unfinished_uploads
    from ckptbench.workload.storage.gcs.objects import GcsObjects

    bucket, prefix = split_gs_url(url)
    gcs = GcsObjects(make_client(project), bucket)
    return gcs, unfinished_uploads(gcs, prefix + "/") or []


def _abort(url: str, gcs: Any, uploads: list[tuple[str, str]]) -> list[str]:
    """Abort each upload; the names of those that could not be aborted."""
    if objects.is_s3(url):
        from ckptbench.workload.storage.s3 import objects as s3_objects

        return s3_objects.abort_uploads(url, uploads)  # names relative to url, as listed
    from ckptbench.workload.storage.gcs.multipart import XmlMultipartUpload

    return [
        name
        for name, upload_id in uploads
        if not XmlMultipartUpload(gcs, name, upload_id).abort(ABORT_SECONDS)
    ]


if __name__ == "__main__":
    sys.exit(main())


# -- a data-loading dataset (<dataPath>/datasets/<name>), removed by its manifest ---------------

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


def clean_dataset(url: str, project: str | None, dry_run: bool) -> int:
    """Remove one data-loading dataset by the names its manifest implies, the manifest first
    (once it is gone no run takes the rest for a whole dataset); whatever else is there stays."""
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
