"""The few GCS object operations the DCP storage layer needs, each retried with backoff.

Bulk data goes through the client's authorized HTTP session directly rather than through
``Blob.upload_from_file`` / ``download_as_bytes``: the library's multipart upload builds the
request body by concatenating the payload (a copy of every part in flight) and its downloads
return fresh ``bytes``. Here a part is sent straight from a memoryview over the tensor's memory
and a range is received straight into the destination tensor.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Any

import requests
from google.cloud import storage

from ckptbench.workload.storage.gcs import crc, google_seam
from ckptbench.workload.storage.retry import (
    DEFAULT_POLICY,
    GcsHttpError,
    IntegrityError,
    RetryPolicy,
    TransientError,
    call_with_retry,
)
from ckptbench.workload.storage.traffic import TRAFFIC

# Read the response body in slices this large: small enough not to double memory per worker,
# large enough that Python overhead per slice is negligible.
_READ_SLICE = 1 << 20


def check_response(resp: requests.Response, what: str, ok: Sequence[int] = (200,)) -> None:
    if resp.status_code not in ok:
        detail = resp.text[:300]
        raise GcsHttpError(f"{what}: HTTP {resp.status_code}: {detail}", resp.status_code)


class GcsObjects:
    """Object operations inside one bucket. Thread-safe: workers share one instance."""

    def __init__(
        self,
        client: storage.Client,
        bucket: str,
        policy: RetryPolicy = DEFAULT_POLICY,
        *,
        checksums: bool = True,
    ) -> None:
        self.client = client
        self.checksums = checksums
        self.bucket_name = bucket
        self.bucket = client.bucket(bucket)
        self.policy = policy
        self._session: Any = google_seam.session(client)
        self._upload_url = google_seam.upload_url(client, bucket)

    def url(self, name: str) -> str:
        return f"gs://{self.bucket_name}/{name}"

    @property
    def session(self) -> Any:
        """The client's authorized ``requests`` session, for requests built by hand."""
        return self._session

    def upload(self, name: str, data: bytes | bytearray | memoryview) -> int | None:
        """Write one object in a single request (media upload); its crc32c when checked.

        ``data`` is sent as is: a memoryview goes to ``socket.sendall`` without a copy. With
        checksums on, the crc32c goes with the request (``X-Goog-Hash``: GCS rejects a body
        that does not match it) and the crc32c the server stored is compared with it: a part
        corrupted in flight is sent again.
        """
        what = f"upload {self.url(name)}"
        body = memoryview(data).cast("B")
        headers = {"Content-Type": "application/octet-stream"}
        sent = crc.value(body) if self.checksums else None
        if sent is not None:
            headers["X-Goog-Hash"] = f"crc32c={crc.to_gcs(sent)}"
        op = self.policy.start()

        def attempt() -> None:
            TRAFFIC.add_sent(body.nbytes)  # every attempt puts the body on the wire
            resp = self._session.post(
                self._upload_url,
                params={"uploadType": "media", "name": name},
                data=body,
                headers=headers,
                timeout=op.timeout(),
            )
            with resp:
                check_response(resp, what)
                if sent is not None:
                    require_sent(stored_crc(resp.json(), what), sent, what)

        call_with_retry(attempt, what, self.policy, operation=op)
        return sent

    def read_range_into(self, name: str, start: int, dest: memoryview) -> None:
        """Fill ``dest`` with the object's bytes [start, start + len(dest)).

        A body cut short is retried from the byte reached, not from ``start``."""
        self.read_range_scattered(name, start, [dest])

    def read_range_scattered(self, name: str, start: int, segments: Sequence[memoryview]) -> None:
        """Fill ``segments``, taken back to back, with the object's bytes from ``start``: one
        request for bytes that belong in several places (each blob's zip records in scratch,
        its payload straight in its tensor). Retried like :meth:`read_range_into`."""
        scatter = _Scatter(segments)
        total = scatter.total
        if total == 0:
            return
        what = f"read {self.url(name)} bytes {start}+{total}"
        end = start + total - 1
        url = google_seam.download_url(self.client, self.bucket_name, name)
        got = 0
        op = self.policy.start()

        def attempt() -> None:
            nonlocal got
            resp = self._session.get(
                url,
                params={"alt": "media"},
                headers={"Range": f"bytes={start + got}-{end}", "Accept-Encoding": "identity"},
                stream=True,
                timeout=op.timeout(),
            )
            with resp:
                check_response(resp, what, ok=(200, 206))
                if resp.status_code == 200 and start + got != 0:
                    raise GcsHttpError(f"{what}: server ignored the Range header", 200)
                for piece in _iter_raw(resp, total - got):
                    scatter.put(got, piece)
                    got += len(piece)
                    TRAFFIC.add_received(len(piece))
                if got != total:
                    # The connection closed early: worth another try, from where it stopped.
                    raise TransientError(f"{what}: body ended after {got} of {total} bytes")

        call_with_retry(attempt, what, self.policy, operation=op)

    def read_range(self, name: str, start: int, length: int) -> bytearray:
        buf = bytearray(length)
        if length:
            self.read_range_into(name, start, memoryview(buf))
        return buf

    def read_all(self, name: str) -> bytes:
        """The whole object; with checksums on, checked against its stored crc32c."""
        what = f"read {self.url(name)}"
        op = self.policy.start()

        def attempt() -> bytes:
            blob = self.bucket.blob(name)
            data: bytes = blob.download_as_bytes(
                retry=None, checksum=None, raw_download=True, timeout=op.timeout()
            )
            TRAFFIC.add_received(len(data))
            if self.checksums:
                if blob.crc32c is None:  # no X-Goog-Hash in the answer: ask for it
                    blob.reload(retry=None, timeout=op.timeout())
                stored = stored_crc({"crc32c": blob.crc32c}, what)
                if crc.value(data) != stored:
                    raise TransientError(
                        f"{what}: crc32c of the {len(data)} bytes read differs from the "
                        f"object's {crc.to_gcs(stored)}: the object is corrupted"
                    )
            return data

        return call_with_retry(attempt, what, self.policy, operation=op)

    def stat(self, name: str) -> tuple[int, int]:
        """The object's size and stored crc32c."""
        what = f"stat {self.url(name)}"
        op = self.policy.start()

        def attempt() -> tuple[int, int]:
            blob = self.bucket.blob(name)
            blob.reload(retry=None, timeout=op.timeout())
            return int(blob.size or 0), stored_crc({"crc32c": blob.crc32c}, what)

        return call_with_retry(attempt, what, self.policy, operation=op)

    def compose(
        self, dest: str, sources: Sequence[str], *, expected_crc: int | None = None
    ) -> None:
        """Compose ``sources`` into ``dest``; with ``expected_crc`` (the sources' crc32cs
        combined), the composed object's crc32c must match it."""
        what = f"compose {self.url(dest)} from {len(sources)} parts"
        blobs = [self.bucket.blob(s) for s in sources]
        target = self.bucket.blob(dest)
        target.content_type = "application/octet-stream"
        op = self.policy.start()
        call_with_retry(
            lambda: target.compose(blobs, retry=None, timeout=op.timeout()),
            what,
            self.policy,
            operation=op,
        )
        if expected_crc is not None and self.checksums:
            stored = stored_crc({"crc32c": target.crc32c}, what)
            if stored != expected_crc:
                raise IntegrityError(
                    f"{what}: composed crc32c {crc.to_gcs(stored)} differs from the parts' "
                    f"combined {crc.to_gcs(expected_crc)}"
                )

    def delete(
        self, name: str, *, missing_ok: bool = False, policy: RetryPolicy | None = None
    ) -> None:
        """Delete ``name`` under ``policy`` (default: this bucket's)."""
        what = f"delete {self.url(name)}"
        policy = policy or self.policy
        op = policy.start()

        def attempt() -> None:
            try:
                self.bucket.blob(name).delete(retry=None, timeout=op.timeout())
            except Exception as exc:
                if missing_ok and getattr(exc, "code", None) == 404:
                    return
                raise

        call_with_retry(attempt, what, policy, operation=op)

    def exists(self, name: str) -> bool:
        what = f"stat {self.url(name)}"
        op = self.policy.start()
        return bool(
            call_with_retry(
                lambda: self.bucket.blob(name).exists(retry=None, timeout=op.timeout()),
                what,
                self.policy,
                operation=op,
            )
        )

    def copy(self, source: str, dest: str) -> None:
        what = f"copy {self.url(source)} to {self.url(dest)}"
        blob = self.bucket.blob(source)
        op = self.policy.start()
        call_with_retry(
            lambda: self.bucket.copy_blob(
                blob, self.bucket, dest, retry=None, timeout=op.timeout()
            ),
            what,
            self.policy,
            operation=op,
        )

    def list_names(self, prefix: str) -> list[str]:
        what = f"list {self.url(prefix)}*"
        op = self.policy.start()
        return call_with_retry(
            lambda: [
                b.name
                for b in self.client.list_blobs(
                    self.bucket_name, prefix=prefix, retry=None, timeout=op.timeout()
                )
            ],
            what,
            self.policy,
            operation=op,
        )


def stored_crc(resource: dict[str, Any], what: str) -> int:
    text = resource.get("crc32c")
    if not isinstance(text, str) or not text:
        raise IntegrityError(f"{what}: the server reported no crc32c to check against")
    return crc.from_gcs(text)


def require_sent(stored: int, sent: int, what: str) -> None:
    """The crc32c the server stored for a request's body must be the one sent with it: a body
    corrupted in flight is worth sending again."""
    if stored != sent:
        raise TransientError(
            f"{what}: stored crc32c {crc.to_gcs(stored)} differs from the crc32c sent "
            f"{crc.to_gcs(sent)}: corrupted in flight"
        )


class _Scatter:
    """Byte views taken back to back as one range: where each received piece goes."""

    def __init__(self, segments: Sequence[memoryview]) -> None:
        self.views = [v.cast("B") if v.format != "B" else v for v in segments]
        self.starts = list(accumulate((v.nbytes for v in self.views), initial=0))
        self.total = self.starts[-1]

    def put(self, at: int, piece: bytes) -> None:
        data = memoryview(piece)
        i = bisect_right(self.starts, at) - 1
        pos = 0
        while pos < data.nbytes:
            view = self.views[i]
            off = at + pos - self.starts[i]
            n = min(view.nbytes - off, data.nbytes - pos)
            view[off : off + n] = data[pos : pos + n]
            pos += n
            i += 1


def _iter_raw(resp: requests.Response, expected: int) -> Iterator[bytes]:
    remaining = expected
    while remaining > 0:
        piece = resp.raw.read(min(_READ_SLICE, remaining), decode_content=False)
        if not piece:
            return
        remaining -= len(piece)
        yield piece
