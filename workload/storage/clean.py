"""``ckptbench clean URL``: remove what dead runs left under a ``gs://`` or ``file://`` prefix.

A run that was killed mid-save leaves its checkpoint objects and the temporary parts of its
composite uploads (``*.distcp.parts/...``); nothing else ever removes them. This deletes every
object (or file) under the prefix, says how many, and names those it could not remove.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ckptbench.workload.storage import objects


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ckptbench clean",
        description="Delete every object or file under a prefix that dead runs left behind.",
    )
    parser.add_argument(
        "url", help="gs://bucket/prefix (a prefix is required) or file:///path (a folder)"
    )
    parser.add_argument("--project", default=None, help="GCP project for the storage client")
    parser.add_argument(
        "--dry-run", action="store_true", help="list what would be deleted, delete nothing"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    url: str = args.url.rstrip("/")
    if url.startswith("gs://"):
        bucket, _, prefix = url.removeprefix("gs://").partition("/")
        if not bucket or not prefix.strip("/"):
            print(
                f"ckptbench clean: {args.url!r}: give gs://bucket/prefix; a whole bucket is "
                "never cleaned",
                file=sys.stderr,
            )
            return 2
    elif "://" in url and not url.startswith("file://"):
        print(f"ckptbench clean: {args.url!r}: use gs:// or file://", file=sys.stderr)
        return 2
    try:
        names = objects.list_names(url, project=args.project)
    except Exception as exc:
        print(f"ckptbench clean: cannot list {url}: {exc}", file=sys.stderr)
        return 1
    if args.dry_run:
        for name in names:
            print(f"{url}/{name}")
        print(f"{len(names)} object(s) under {url} would be deleted")
        return 0
    outcome = objects.delete_all(url, project=args.project)
    print(f"deleted {outcome.deleted} object(s) under {url}")
    if outcome.failed:
        shown = ", ".join(outcome.failed[:10]) + (" ..." if len(outcome.failed) > 10 else "")
        print(
            f"could not delete {len(outcome.failed)} object(s): {shown} "
            f"(first error: {outcome.first_error})",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
