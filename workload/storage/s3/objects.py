"""Small-object I/O on ``s3://`` URLs through boto3: results files, listings, deletes, and the
unfinished multipart uploads a dead upload leaves (invisible to listings, billed until aborted).

Checkpoint data goes through the DCP backends (``s3``, ``s3fs``); this module serves everything
around them. Names are relative to the URL's folder. The client retries throttling and broken
connections itself (botocore's standard mode), each retry logged by botocore.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ckptbench.workload.storage.outcome import DeleteOutcome
from ckptbench.workload.storage.s3.where import S3Where, current, split_s3_url

ATTEMPTS = 6
CONNECT_SECONDS = 10.0
READ_SECONDS = 60.0

_CLIENTS: dict[tuple[S3Where, float, int], Any] = {}
_LOCK = threading.Lock()


def client(
    where: S3Where | None = None, *, timeout: float = READ_SECONDS, attempts: int = ATTEMPTS
) -> Any:
    """A boto3 S3 client for ``where`` (default: this process's), made once and kept."""
    import boto3
    from botocore.config import Config

    where = where or current()
    key = (where, timeout, attempts)
    with _LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = boto3.session.Session().client(
                "s3",
                endpoint_url=where.endpoint,
                region_name=where.region,
                config=Config(
                    s3={"addressing_style": "path" if where.path_style else "auto"},
                    retries={"mode": "standard", "max_attempts": attempts},
                    connect_timeout=min(timeout, CONNECT_SECONDS),
                    read_timeout=timeout,
                ),
            )
        return _CLIENTS[key]


def _folder(url: str) -> tuple[str, str]:
    bucket, key = split_s3_url(url)
    return bucket, key + "/" if key else ""


def matches(name: str, name_prefix: str) -> bool:
    """Whether ``name`` is one of ``name_prefix``'s: DCP's ``__<rank>_`` objects may sit in a
    prefix strategy's folder (``7/__3_0.distcp``), so the last path part counts too."""
    return name.startswith(name_prefix) or name.rsplit("/", 1)[-1].startswith(name_prefix)


def write_text(url: str, text: str, *, attempts: int = ATTEMPTS) -> None:
    bucket, key = split_s3_url(url)
    client(attempts=attempts).put_object(
        Bucket=bucket, Key=key, Body=text.encode(), ContentType="application/json"
    )


def read_text(url: str) -> str:
    bucket, key = split_s3_url(url)
    body: bytes = client().get_object(Bucket=bucket, Key=key)["Body"].read()
    return body.decode()


def list_sizes(url: str, *, where: S3Where | None = None) -> dict[str, int]:
    """Bytes of every object under the folder ``url``, by name relative to it."""
    bucket, folder = _folder(url)
    pages = client(where).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder)
    return {
        o["Key"][len(folder) :]: int(o["Size"]) for page in pages for o in page.get("Contents", [])
    }


def list_names(url: str, *, where: S3Where | None = None) -> list[str]:
    return sorted(list_sizes(url, where=where))


def unfinished_uploads(url: str, *, where: S3Where | None = None) -> list[tuple[str, str]]:
    """(name relative to ``url``, upload id) of every unfinished multipart upload under it."""
    bucket, folder = _folder(url)
    pages = (
        client(where).get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=folder)
    )
    return [
        (u["Key"][len(folder) :], u["UploadId"]) for page in pages for u in page.get("Uploads", [])
    ]


def delete_all(
    url: str,
    *,
    name_prefix: str = "",
    seconds: float | None = None,
    where: S3Where | None = None,
    names: list[str] | None = None,
) -> DeleteOutcome:
    """Delete every object under ``url`` that :func:`matches` ``name_prefix`` and abort every
    unfinished multipart upload of such a name, best effort: what could not be removed is named
    in the outcome, never raised. With ``seconds``, each request is bounded and what was not
    reached in that time is named, untried. With ``names`` (relative to ``url``), exactly those
    objects are deleted and no upload is aborted (``ckptbench clean`` chooses those itself)."""
    outcome = DeleteOutcome()
    until = None if seconds is None else time.monotonic() + seconds
    s3 = (
        client(where)
        if seconds is None
        else client(where, timeout=max(1.0, seconds / 4), attempts=2)
    )
    bucket, folder = _folder(url)
    try:
        if names is None:
            names = [n for n in list_names(url, where=where) if matches(n, name_prefix)]
            uploads = [
                u for u in unfinished_uploads(url, where=where) if matches(u[0], name_prefix)
            ]
        else:
            uploads = []
    except Exception as exc:
        outcome.note(f"{name_prefix}*", exc)
        return outcome
    for start in range(0, len(names), 1000):  # DeleteObjects takes at most 1000 keys
        batch = names[start : start + 1000]
        if until is not None and time.monotonic() > until:
            for name in batch:
                outcome.note(name, TimeoutError(f"not reached within {seconds:.0f} s"))
            continue
        try:
            answer = s3.delete_objects(
                Bucket=bucket,
                Delete={"Objects": [{"Key": folder + n} for n in batch], "Quiet": True},
            )
        except Exception as exc:
            for name in batch:
                outcome.note(name, exc)
            continue
        errors = answer.get("Errors", [])
        for error in errors:
            outcome.note(
                error["Key"][len(folder) :],
                RuntimeError(f"{error.get('Code')}: {error.get('Message')}"),
            )
        outcome.deleted += len(batch) - len(errors)
    for name, upload_id in uploads:
        try:
            s3.abort_multipart_upload(Bucket=bucket, Key=folder + name, UploadId=upload_id)
        except Exception as exc:
            if "NoSuchUpload" not in str(exc):
                outcome.note(f"{name} (multipart upload {upload_id})", exc)
    return outcome


def abort_uploads(url: str, uploads: list[tuple[str, str]]) -> list[str]:
    """Abort each ``(name, upload id)`` under ``url``; the names of those that could not be."""
    s3 = client(None)
    bucket, folder = _folder(url)
    left = []
    for name, upload_id in uploads:
        try:
            s3.abort_multipart_upload(Bucket=bucket, Key=folder + name, UploadId=upload_id)
        except Exception as exc:
            if "NoSuchUpload" not in str(exc):
                left.append(name)
    return left


def delete_prefix(url: str, *, name_prefix: str = "") -> int:
    """Delete like :func:`delete_all`, raising the first error; returns how many objects went."""
    outcome = delete_all(url, name_prefix=name_prefix)
    if outcome.failed:
        raise RuntimeError(
            f"could not delete {len(outcome.failed)} object(s) under {url}: {outcome.first_error}"
        )
    return outcome.deleted
