"""The few GCS object operations the DCP storage layer needs, each retried with backoff.

Bulk data goes through the client's authorized HTTP session directly rather than through
``Blob.upload_from_file`` / ``download_as_bytes``: the library's multipart upload builds the
request body by concatenating the payload (a copy of every part in flight) and its downloads
return fresh ``bytes``. Here a part is sent straight from a memoryview over the tensor's memory
and a range is received straight into the destination tensor.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any

import requests
from google.cloud import storage

from ckptbench.workload.storage.retry import (
    DEFAULT_POLICY,
    GcsHttpError,
    RetryPolicy,
    call_with_retry,
)

# Read the response body in slices this large: small enough not to double memory per worker,
# large enough that Python overhead per slice is negligible.
_READ_SLICE = 1 << 20
# (connect, read) seconds; read is the longest silence tolerated mid-transfer.
_TIMEOUT = (30.0, 300.0)


def _api_base(client: storage.Client) -> str:
    conn = client._connection
    base: str = (
        conn.get_api_base_url_for_mtls()
        if hasattr(conn, "get_api_base_url_for_mtls")
        else conn.API_BASE_URL
    )
    return base.rstrip("/")


def _check(resp: requests.Response, what: str, ok: Sequence[int] = (200,)) -> None:
    if resp.status_code not in ok:
        detail = resp.text[:300]
        raise GcsHttpError(f"{what}: HTTP {resp.status_code}: {detail}", resp.status_code)


class GcsObjects:
    """Object operations inside one bucket. Thread-safe: workers share one instance."""

    def __init__(
        self, client: storage.Client, bucket: str, policy: RetryPolicy = DEFAULT_POLICY
    ) -> None:
        self.client = client
        self.bucket_name = bucket
        self.bucket = client.bucket(bucket)
        self.policy = policy
        self._session: Any = client._http
        base = _api_base(client)
        quoted_bucket = urllib.parse.quote(bucket, safe="")
        self._upload_url = f"{base}/upload/storage/v1/b/{quoted_bucket}/o"
        self._download_url = f"{base}/download/storage/v1/b/{quoted_bucket}/o"

    def url(self, name: str) -> str:
        return f"gs://{self.bucket_name}/{name}"

    def upload(self, name: str, data: bytes | bytearray | memoryview) -> None:
        """Write one object in a single request (media upload).

        ``data`` is sent as is: a memoryview goes to ``socket.sendall`` without a copy.
        """
        what = f"upload {self.url(name)}"
        body = memoryview(data).cast("B")

        def attempt() -> None:
            resp = self._session.post(
                self._upload_url,
                params={"uploadType": "media", "name": name},
                data=body,
                headers={"Content-Type": "application/octet-stream"},
                timeout=_TIMEOUT,
            )
            with resp:
                _check(resp, what)

        call_with_retry(attempt, what, self.policy)

    def read_range_into(self, name: str, start: int, dest: memoryview) -> None:
        """Fill ``dest`` with the object's bytes [start, start + len(dest))."""
        what = f"read {self.url(name)} bytes {start}+{dest.nbytes}"
        dest = dest.cast("B") if dest.format != "B" else dest
        end = start + dest.nbytes - 1

        def attempt() -> None:
            resp = self._session.get(
                f"{self._download_url}/{urllib.parse.quote(name, safe='')}",
                params={"alt": "media"},
                headers={"Range": f"bytes={start}-{end}", "Accept-Encoding": "identity"},
                stream=True,
                timeout=_TIMEOUT,
            )
            with resp:
                _check(resp, what, ok=(200, 206))
                if resp.status_code == 200 and start != 0:
                    raise GcsHttpError(f"{what}: server ignored the Range header", 200)
                got = 0
                for piece in _iter_raw(resp, dest.nbytes):
                    dest[got : got + len(piece)] = piece
                    got += len(piece)
                if got != dest.nbytes:
                    # A short body means the connection broke: worth another try.
                    raise requests.exceptions.ChunkedEncodingError(
                        f"{what}: got {got} of {dest.nbytes} bytes"
                    )

        call_with_retry(attempt, what, self.policy)

    def read_range(self, name: str, start: int, length: int) -> bytearray:
        buf = bytearray(length)
        if length:
            self.read_range_into(name, start, memoryview(buf))
        return buf

    def read_all(self, name: str) -> bytes:
        what = f"read {self.url(name)}"

        def attempt() -> bytes:
            data: bytes = self.bucket.blob(name).download_as_bytes(
                retry=None, checksum=None, raw_download=True, timeout=_TIMEOUT
            )
            return data

        return call_with_retry(attempt, what, self.policy)

    def compose(self, dest: str, sources: Sequence[str]) -> None:
        what = f"compose {self.url(dest)} from {len(sources)} parts"
        blobs = [self.bucket.blob(s) for s in sources]
        target = self.bucket.blob(dest)
        target.content_type = "application/octet-stream"
        call_with_retry(lambda: target.compose(blobs, retry=None, timeout=_TIMEOUT), what)

    def delete(self, name: str, *, missing_ok: bool = False) -> None:
        what = f"delete {self.url(name)}"

        def attempt() -> None:
            try:
                self.bucket.blob(name).delete(retry=None, timeout=_TIMEOUT)
            except Exception as exc:
                if missing_ok and getattr(exc, "code", None) == 404:
                    return
                raise

        call_with_retry(attempt, what, self.policy)

    def exists(self, name: str) -> bool:
        what = f"stat {self.url(name)}"
        return bool(
            call_with_retry(
                lambda: self.bucket.blob(name).exists(retry=None, timeout=_TIMEOUT),
                what,
                self.policy,
            )
        )

    def copy(self, source: str, dest: str) -> None:
        what = f"copy {self.url(source)} to {self.url(dest)}"
        blob = self.bucket.blob(source)
        call_with_retry(
            lambda: self.bucket.copy_blob(blob, self.bucket, dest, retry=None, timeout=_TIMEOUT),
            what,
            self.policy,
        )

    def list_names(self, prefix: str) -> list[str]:
        what = f"list {self.url(prefix)}*"
        return call_with_retry(
            lambda: [b.name for b in self.client.list_blobs(self.bucket_name, prefix=prefix)],
            what,
            self.policy,
        )


def _iter_raw(resp: requests.Response, expected: int) -> Iterator[bytes]:
    remaining = expected
    while remaining > 0:
        piece = resp.raw.read(min(_READ_SLICE, remaining), decode_content=False)
        if not piece:
            return
        remaining -= len(piece)
        yield piece
