"""One way to make a google-cloud-storage client, for real GCS and for an emulator alike."""

from __future__ import annotations

import os

from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from ckptbench.workload.contract.names import EMULATOR_ENV
from ckptbench.workload.storage.gcs import google_seam


def emulator_host() -> str | None:
    return os.environ.get(EMULATOR_ENV) or None


def make_client(project: str | None = None, pool_size: int = 16) -> storage.Client:
    """A client with Application Default Credentials, or anonymous ones against an emulator.

    ``pool_size`` sizes the HTTP connection pool: parallel transfers need one connection per
    thread, and requests' default of 10 would make threads queue for a socket.
    """
    if emulator_host():
        client = storage.Client(project=project or "ckptbench", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    else:
        client = storage.Client(project=project)
    google_seam.size_pool(client, pool_size)
    return client


def split_gs_url(url: str) -> tuple[str, str]:
    """``gs://bucket/a/b`` -> (``bucket``, ``a/b``); the bucket name is required."""
    if not url.startswith("gs://"):
        raise ValueError(f"not a gs:// URL: {url!r}")
    bucket, _, name = url.removeprefix("gs://").partition("/")
    if not bucket:
        raise ValueError(f"gs:// URL has no bucket: {url!r}")
    return bucket, name.strip("/")
