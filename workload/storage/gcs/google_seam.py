"""Every private name of google-cloud-storage the project uses, in one place, checked at import.

The gcs backend moves bulk data through the client's own authorized ``requests`` session
(``Client._http``) so that a part is sent straight from a tensor's memory and a range is received
straight into one, which the library's ``Blob`` helpers cannot do. That needs the session, the API
base URL the client's connection resolved (``_connection``, which honours an emulator and mTLS), and
the JSON API's upload and download URLs built by hand. All of it was written against
:data:`WRITTEN_FOR`; another version gets a warning naming both, and a client without these names
fails saying which.
"""

from __future__ import annotations

import urllib.parse
import warnings
from typing import Any

import requests.adapters
from google.cloud import storage

WRITTEN_FOR = "3.17"


class GoogleSeamError(RuntimeError):
    """A private google-cloud-storage name this project relies on is gone."""


def check_version(found: str = storage.__version__) -> str | None:
    """A warning text when ``found`` is not the release this seam was written for, else None."""
    if found == WRITTEN_FOR or found.startswith(WRITTEN_FOR + "."):
        return None
    return (
        f"ckptbench's google-cloud-storage seam was written for {WRITTEN_FOR}.x, found {found}: "
        "the gcs backend's hand-built requests may behave differently"
    )


def _check_names() -> None:
    missing = [n for n in ("_http", "_connection") if not hasattr(storage.Client, n)]
    if missing:
        raise GoogleSeamError(
            f"google-cloud-storage {storage.__version__} has no Client.{', '.join(missing)}, which "
            f"ckptbench (written for {WRITTEN_FOR}) uses"
        )


_check_names()
_mismatch = check_version()
if _mismatch is not None:
    warnings.warn(_mismatch, RuntimeWarning, stacklevel=2)


def session(client: storage.Client) -> Any:
    """The client's authorized ``requests`` session (credentials refreshed on use)."""
    return client._http


def size_pool(client: storage.Client, pool_size: int) -> None:
    """One pooled connection per transfer thread (requests' default of 10 makes threads queue),
    and no urllib3-level retries: every retry goes through our own policy."""
    adapter = requests.adapters.HTTPAdapter(
        pool_connections=pool_size, pool_maxsize=pool_size, max_retries=0
    )
    http = session(client)
    http.mount("https://", adapter)
    http.mount("http://", adapter)


def api_base(client: storage.Client) -> str:
    conn = client._connection
    base: str = (
        conn.get_api_base_url_for_mtls()
        if hasattr(conn, "get_api_base_url_for_mtls")
        else conn.API_BASE_URL
    )
    return base.rstrip("/")


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def upload_url(client: storage.Client, bucket: str) -> str:
    """The JSON API's upload endpoint (``uploadType`` and ``name`` go in the query)."""
    return f"{api_base(client)}/upload/storage/v1/b/{_quote(bucket)}/o"


def download_url(client: storage.Client, bucket: str, name: str) -> str:
    """The JSON API's media download URL of one object (add ``alt=media``)."""
    return f"{api_base(client)}/download/storage/v1/b/{_quote(bucket)}/o/{_quote(name)}"


def xml_object_url(client: storage.Client, bucket: str, name: str) -> str:
    """The XML API's URL of one object (the multipart upload's requests go there); the
    library's own ``transfer_manager`` builds it the same way, on the connection's base URL."""
    return f"{api_base(client)}/{_quote(bucket)}/{_quote(name)}"


def xml_bucket_url(client: storage.Client, bucket: str) -> str:
    """The XML API's URL of one bucket (unfinished multipart uploads are listed there)."""
    return f"{api_base(client)}/{_quote(bucket)}"


def object_url(client: storage.Client, bucket: str, name: str) -> str:
    """The JSON API's metadata URL of one object."""
    return f"{api_base(client)}/storage/v1/b/{_quote(bucket)}/o/{_quote(name)}"
