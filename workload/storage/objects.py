"""Small-object I/O on local paths and ``gs://`` URLs: results files and checkpoint cleanup.

Checkpoint data itself goes through the DCP backends; this module only writes and reads JSON
results and deletes a checkpoint's objects. GCS answers 429 and 5xx when load ramps up, so every
request here retries those (and dropped connections) with jittered exponential backoff.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ATTEMPTS = 6
_BASE_DELAY = 0.25
_MAX_DELAY = 8.0
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def is_gs(url: str) -> bool:
    return url.startswith("gs://")


def local_path(url: str) -> Path:
    return Path(url.removeprefix("file://"))


def write_text(
    url: str, text: str, *, project: str | None = None, attempts: int = ATTEMPTS
) -> None:
    if is_gs(url):
        bucket, name = _split(url)
        blob = _client(project).bucket(bucket).blob(name)
        # One writer per results object, so retrying an upload cannot clobber anyone else's.
        with_retries(
            lambda: blob.upload_from_string(
                text.encode(), content_type="application/json", retry=None
            ),
            f"writing {url}",
            attempts=attempts,
        )
        return
    path = local_path(url)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)  # readers never see half a file


def read_text(url: str, *, project: str | None = None) -> str:
    if is_gs(url):
        bucket, name = _split(url)
        blob = _client(project).bucket(bucket).blob(name)
        data: bytes = with_retries(lambda: blob.download_as_bytes(retry=None), f"reading {url}")
        return data.decode()
    return local_path(url).read_text()


def list_names(url: str, *, project: str | None = None) -> list[str]:
    """Names (relative to ``url``) of every object or file under the folder ``url``."""
    if is_gs(url):
        bucket, prefix = _split(url)
        prefix = prefix + "/" if prefix else ""
        client = _client(project)
        blobs = with_retries(
            lambda: list(client.list_blobs(bucket, prefix=prefix, retry=None)), f"listing {url}"
        )
        return sorted(b.name[len(prefix) :] for b in blobs)
    root = local_path(url)
    if not root.is_dir():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def delete_prefix(url: str, *, name_prefix: str = "", project: str | None = None) -> int:
    """Delete everything under the folder ``url`` whose relative name starts with ``name_prefix``.

    With no ``name_prefix`` the folder itself goes too. Returns how many objects or files were
    deleted; objects that vanish meanwhile count as deleted by someone else, not as errors.
    """
    if is_gs(url):
        return _delete_gs(url, name_prefix, project)
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


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def _delete_gs(url: str, name_prefix: str, project: str | None) -> int:
    from google.api_core import exceptions

    bucket_name, prefix = _split(url)
    folder = prefix + "/" if prefix else ""
    client = _client(project)
    bucket = client.bucket(bucket_name)
    blobs = with_retries(
        lambda: list(client.list_blobs(bucket_name, prefix=folder + name_prefix, retry=None)),
        f"listing {url}",
    )
    count = 0
    for blob in blobs:

        def delete(blob: Any = blob) -> None:
            with contextlib.suppress(exceptions.NotFound):
                bucket.delete_blob(blob.name, retry=None)

        with_retries(delete, f"deleting gs://{bucket_name}/{blob.name}")
        count += 1
    return count


def with_retries(
    call: Callable[[], T],
    what: str,
    *,
    attempts: int = ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``call``; on a transient failure wait a jittered, growing delay and try again."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:
            if attempt == attempts or not is_transient(exc):
                raise
            # Full jitter: ranks that failed together do not retry together.
            sleep(random.uniform(0, min(_MAX_DELAY, _BASE_DELAY * 2 ** (attempt - 1))))
    raise AssertionError("unreachable")  # pragma: no cover


def is_transient(exc: BaseException) -> bool:
    """429, 5xx, timeouts and dropped connections: worth another try."""
    import requests
    from google.api_core import exceptions

    if isinstance(exc, exceptions.GoogleAPICallError):
        return exc.code in _TRANSIENT_STATUS
    return isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout)


def _split(url: str) -> tuple[str, str]:
    from ckptbench.workload.storage.gcs.client import split_gs_url

    return split_gs_url(url)


_CLIENTS: dict[tuple[str | None, str | None], Any] = {}


def _client(project: str | None) -> Any:
    # Reused: each client builds its own connection pool and credentials. Keyed by the emulator
    # address too, since that is read when a client is made.
    from ckptbench.workload.storage.gcs.client import emulator_host, make_client

    key = (project, emulator_host())
    if key not in _CLIENTS:
        _CLIENTS[key] = make_client(project)
    return _CLIENTS[key]
