"""Small-object I/O on local paths, ``gs://`` and ``s3://`` URLs: results and checkpoint cleanup.

Checkpoint data itself goes through the DCP backends; this module only writes and reads JSON
results and deletes a checkpoint's objects. Every request goes through the one retry policy of
:mod:`ckptbench.workload.storage.retry`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import time
from typing import Any

from ckptbench.workload.storage.file.paths import local_path
from ckptbench.workload.storage.outcome import DeleteOutcome
from ckptbench.workload.storage.retry import DEFAULT_POLICY, RetryPolicy, call_with_retry

ATTEMPTS = DEFAULT_POLICY.attempts


def is_gs(url: str) -> bool:
    return url.startswith("gs://")


def is_s3(url: str) -> bool:
    return url.startswith("s3://")


def _s3() -> Any:
    from ckptbench.workload.storage.s3 import objects as s3_objects

    return s3_objects


def write_text(
    url: str, text: str, *, project: str | None = None, attempts: int = ATTEMPTS
) -> None:
    if is_s3(url):
        _s3().write_text(url, text, attempts=attempts)
        return
    if is_gs(url):
        bucket, name = _split(url)
        blob = _client(project).bucket(bucket).blob(name)
        # One writer per results object, so retrying an upload cannot clobber anyone else's.
        call_with_retry(
            lambda: blob.upload_from_string(
                text.encode(), content_type="application/json", retry=None
            ),
            f"writing {url}",
            dataclasses.replace(DEFAULT_POLICY, attempts=attempts),
        )
        return
    path = local_path(url)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)  # readers never see half a file


def read_text(url: str, *, project: str | None = None) -> str:
    if is_s3(url):
        text: str = _s3().read_text(url)
        return text
    if is_gs(url):
        bucket, name = _split(url)
        blob = _client(project).bucket(bucket).blob(name)
        data: bytes = call_with_retry(lambda: blob.download_as_bytes(retry=None), f"reading {url}")
        return data.decode()
    return local_path(url).read_text()


def list_names(
    url: str,
    *,
    project: str | None = None,
    client: Any = None,
    policy: RetryPolicy = DEFAULT_POLICY,
) -> list[str]:
    """Names (relative to ``url``) of every object or file under the folder ``url``."""
    if is_s3(url):
        names: list[str] = _s3().list_names(url)
        return names
    if is_gs(url):
        bucket, prefix = _split(url)
        prefix = prefix + "/" if prefix else ""
        gcs = client or _client(project)
        blobs = call_with_retry(
            lambda: list(gcs.list_blobs(bucket, prefix=prefix, retry=None)),
            f"listing {url}",
            policy,
        )
        return sorted(b.name[len(prefix) :] for b in blobs)
    root = local_path(url)
    if not root.is_dir():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def list_sizes(url: str, *, project: str | None = None) -> dict[str, int]:
    """Bytes of every object or file under the folder ``url``, by name relative to it."""
    if is_s3(url):
        sizes: dict[str, int] = _s3().list_sizes(url)
        return sizes
    if is_gs(url):
        bucket, prefix = _split(url)
        prefix = prefix + "/" if prefix else ""
        client = _client(project)
        blobs = call_with_retry(
            lambda: list(client.list_blobs(bucket, prefix=prefix, retry=None)), f"listing {url}"
        )
        return {b.name[len(prefix) :]: int(b.size or 0) for b in blobs}
    root = local_path(url)
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def delete_prefix(
    url: str, *, name_prefix: str = "", project: str | None = None, client: Any = None
) -> int:
    """Delete everything under the folder ``url`` whose relative name starts with ``name_prefix``.

    With no ``name_prefix`` the folder itself goes too. ``client`` is a google-cloud-storage client
    to reuse (a rank's session's); without one, a client per project is made once and kept.
    Returns how many objects or files were deleted; objects that vanish meanwhile count as
    deleted by someone else, not as errors.
    """
    if is_s3(url):
        count: int = _s3().delete_prefix(url, name_prefix=name_prefix)
        return count
    if is_gs(url):
        return _delete_gs(url, name_prefix, client or _client(project))
    root = local_path(url)
    if not root.exists():
        return 0
    if not name_prefix:
        count = sum(1 for p in root.rglob("*") if not p.is_dir())
        shutil.rmtree(root, ignore_errors=False)
        return count
    count = 0
    for path in root.glob(glob_escape(name_prefix) + "*"):
        if path.is_dir():
            count += sum(1 for p in path.rglob("*") if not p.is_dir())
            shutil.rmtree(path)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                count += 1
    return count


def delete_all(
    url: str,
    *,
    name_prefix: str = "",
    project: str | None = None,
    client: Any = None,
    policy: RetryPolicy = DEFAULT_POLICY,
    seconds: float | None = None,
    names: list[str] | None = None,
) -> DeleteOutcome:
    """Like :func:`delete_prefix`, but best effort: every object is tried under ``policy``, and
    the ones that could not be deleted are named in the outcome instead of raising. With
    ``seconds``, objects not reached in that time are named too, untried. With ``names``
    (relative to ``url``), exactly those are deleted and a local folder is kept."""
    if is_s3(url):
        s3_outcome: DeleteOutcome = _s3().delete_all(
            url, name_prefix=name_prefix, seconds=seconds, names=names
        )
        return s3_outcome
    outcome = DeleteOutcome()
    until = None if seconds is None else time.monotonic() + seconds
    chosen = names is not None
    if names is None:
        try:
            names = [
                n
                for n in list_names(url, project=project, client=client, policy=policy)
                if n.startswith(name_prefix)
            ]
        except Exception as exc:
            outcome.note(f"{name_prefix}*", exc)
            return outcome
    if not is_gs(url):
        for name in names:
            try:
                (local_path(url) / name).unlink(missing_ok=True)
                outcome.deleted += 1
            except OSError as exc:
                outcome.note(name, exc)
        if not name_prefix and not chosen and not outcome.failed:
            shutil.rmtree(local_path(url), ignore_errors=True)
        return outcome
    from google.api_core import exceptions

    bucket_name, prefix = _split(url)
    folder = prefix + "/" if prefix else ""
    bucket = (client or _client(project)).bucket(bucket_name)
    for name in names:
        if until is not None and time.monotonic() > until:
            outcome.note(name, TimeoutError(f"not reached within {seconds:.0f} s"))
            continue

        def delete(name: str = name) -> None:
            with contextlib.suppress(exceptions.NotFound):
                bucket.delete_blob(folder + name, retry=None, timeout=policy.stall_seconds)

        try:
            call_with_retry(delete, f"deleting gs://{bucket_name}/{folder}{name}", policy)
            outcome.deleted += 1
        except Exception as exc:
            outcome.note(name, exc)
    return outcome


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def _delete_gs(url: str, name_prefix: str, client: Any) -> int:
    from google.api_core import exceptions

    bucket_name, prefix = _split(url)
    folder = prefix + "/" if prefix else ""
    bucket = client.bucket(bucket_name)
    blobs = call_with_retry(
        lambda: list(client.list_blobs(bucket_name, prefix=folder + name_prefix, retry=None)),
        f"listing {url}",
    )
    count = 0
    for blob in blobs:

        def delete(blob: Any = blob) -> None:
            with contextlib.suppress(exceptions.NotFound):
                bucket.delete_blob(blob.name, retry=None)

        call_with_retry(delete, f"deleting gs://{bucket_name}/{blob.name}")
        count += 1
    return count


def _split(url: str) -> tuple[str, str]:
    from ckptbench.workload.storage.gcs.client import split_gs_url

    return split_gs_url(url)


_CLIENTS: dict[tuple[str | None, str | None], Any] = {}


def shared_client(project: str | None) -> Any:
    """The google-cloud-storage client this module deletes and lists with, made now if not yet
    (a gcsfs rank makes it before timing, so its first timed delete does not)."""
    return _client(project)


def _client(project: str | None) -> Any:
    # Reused: each client builds its own connection pool and credentials. Keyed by the emulator
    # address too, since that is read when a client is made.
    from ckptbench.workload.storage.gcs.client import emulator_host, make_client

    key = (project, emulator_host())
    if key not in _CLIENTS:
        _CLIENTS[key] = make_client(project)
    return _CLIENTS[key]
