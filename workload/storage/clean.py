"""``ckptbench clean URL``: remove what dead runs left under a ``gs://``, ``s3://`` or ``file://``
prefix.

A run that was killed mid-save leaves its checkpoint objects, the temporary parts of its
composite uploads (``*.distcp.parts/...``) and, with the multipart upload scheme, unfinished XML
multipart uploads (parts no object listing shows, billed until aborted); nothing else ever removes
them. This deletes every object (or file) under the prefix, aborts every unfinished multipart
upload under it, says how many, and names those it could not remove.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ckptbench.workload.contract.settings import s3_bucket_problem
from ckptbench.workload.storage import objects

# How long aborting one unfinished multipart upload may take, retries included.
ABORT_SECONDS = 60.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ckptbench clean",
        description="Delete every object or file under a prefix that dead runs left behind.",
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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    url: str = args.url.rstrip("/")
    if url.startswith(("gs://", "s3://")):
        scheme = url[:5]
        bucket, _, prefix = url.removeprefix(scheme).partition("/")
        if not bucket or not prefix.strip("/"):
            print(
                f"ckptbench clean: {args.url!r}: give {scheme}bucket/prefix; a whole bucket is "
                "never cleaned",
                file=sys.stderr,
            )
            return 2
        problem = s3_bucket_problem(bucket) if scheme == "s3://" else None
        if problem is not None:
            print(f"ckptbench clean: {args.url!r}: {problem}", file=sys.stderr)
            return 2
    elif "://" in url and not url.startswith("file://"):
        print(f"ckptbench clean: {args.url!r}: use gs://, s3:// or file://", file=sys.stderr)
        return 2
    if url.startswith("s3://"):
        return _clean_s3(url, args.dry_run)
    try:
        names = objects.list_names(url, project=args.project)
        gcs, uploads = _unfinished(url, args.project) if url.startswith("gs://") else (None, [])
    except Exception as exc:
        print(f"ckptbench clean: cannot list {url}: {exc}", file=sys.stderr)
        return 1
    if args.dry_run:
        for name in names:
            print(f"{url}/{name}")
        for name, upload_id in uploads:
            print(f"unfinished multipart upload {upload_id} of {name}")
        print(f"{len(names)} object(s) under {url} would be deleted")
        if uploads:
            print(f"{len(uploads)} unfinished multipart upload(s) would be aborted")
        return 0
    outcome = objects.delete_all(url, project=args.project)
    print(f"deleted {outcome.deleted} object(s) under {url}")
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
        left = _abort(gcs, uploads)
        print(f"aborted {len(uploads) - len(left)} unfinished multipart upload(s)")
        if left:
            print(f"could not abort the multipart uploads of: {', '.join(left)}", file=sys.stderr)
            status = 1
    return status


def _clean_s3(url: str, dry_run: bool) -> int:
    """Every object and every unfinished multipart upload under ``url``: listed, or removed."""
    from ckptbench.workload.storage.s3 import objects as s3_objects

    try:
        names = s3_objects.list_names(url)
        uploads = s3_objects.unfinished_uploads(url)
    except Exception as exc:
        print(f"ckptbench clean: cannot list {url}: {exc}", file=sys.stderr)
        return 1
    if dry_run:
        for name in names:
            print(f"{url}/{name}")
        for name, upload_id in uploads:
            print(f"unfinished multipart upload {upload_id} of {name}")
        print(f"{len(names)} object(s) under {url} would be deleted")
        print(f"{len(uploads)} unfinished multipart upload(s) would be aborted")
        return 0
    outcome = s3_objects.delete_all(url)
    aborted = [u for u in uploads if not any(f.startswith(f"{u[0]} (") for f in outcome.failed)]
    print(f"deleted {outcome.deleted} object(s) under {url}")
    print(f"aborted {len(aborted)} unfinished multipart upload(s)")
    if outcome.failed:
        shown = ", ".join(outcome.failed[:10]) + (" ..." if len(outcome.failed) > 10 else "")
        print(
            f"could not remove {len(outcome.failed)}: {shown} (first error: {outcome.first_error})",
            file=sys.stderr,
        )
        return 1
    return 0


def _unfinished(url: str, project: str | None) -> tuple[Any, list[tuple[str, str]]]:
    """The bucket's objects and the unfinished multipart uploads under ``url`` (none where the
    server has no XML API, as on an emulator)."""
    from ckptbench.workload.storage.gcs.client import make_client, split_gs_url
    from ckptbench.workload.storage.gcs.multipart import unfinished_uploads
    from ckptbench.workload.storage.gcs.objects import GcsObjects

    bucket, prefix = split_gs_url(url)
    gcs = GcsObjects(make_client(project), bucket)
    return gcs, unfinished_uploads(gcs, prefix + "/") or []


def _abort(gcs: Any, uploads: list[tuple[str, str]]) -> list[str]:
    """Abort each upload; the names of those that could not be aborted."""
    from ckptbench.workload.storage.gcs.multipart import XmlMultipartUpload

    return [
        name
        for name, upload_id in uploads
        if not XmlMultipartUpload(gcs, name, upload_id).abort(ABORT_SECONDS)
    ]


if __name__ == "__main__":
    sys.exit(main())
