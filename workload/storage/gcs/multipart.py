"""GCS's XML API multipart upload: a rank's parts uploaded into one upload, then completed.

Google recommends it for parallel uploads (https://cloud.google.com/storage/docs/multipart-uploads),
and it is what the peer and google-cloud-storage's ``transfer_manager.upload_chunks_concurrently``
use. Against the parallel composite upload (:mod:`.upload`) it saves the compose requests and one
delete per part, and has none of a composite object's caveats (early-deletion charges for parts
on colder storage classes). Its rules: part numbers 1 to 10,000, every part but the last at least
5 MiB, completion lists each part's number and ETag in ascending order. No emulator implements
it; ``workload/local/loopback/xml_multipart.py`` gives fake-gcs-server one for the tests.

Integrity: each part carries its crc32c (``x-goog-hash``; GCS refuses a part that does not match,
400 ``BadDigest``, and the part is sent again), and the completed object's crc32c is compared
with the parts' combined. A completion whose answer was lost and whose retry finds the upload
gone (404) counts as done when the object is there with the expected crc32c.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Unpack
from xml.etree import ElementTree
from xml.sax.saxutils import escape

import requests

from ckptbench.workload.storage.gcs import crc, google_seam
from ckptbench.workload.storage.gcs.objects import (
    GcsObjects,
    check_response,
    require_sent,
    stored_crc,
)
from ckptbench.workload.storage.gcs.parts import PartedUploadStream, StreamOptions
from ckptbench.workload.storage.retry import (
    GcsError,
    IntegrityError,
    Operation,
    TransientError,
    call_with_retry,
    discard_policy,
)
from ckptbench.workload.storage.traffic import TRAFFIC

log = logging.getLogger(__name__)

MAX_PARTS = 10_000
# Every part but the last must be at least this large.
MIN_PART_BYTES = 5 * 1024 * 1024
# Parts kept free for the last, short part (the buffer flushed at close).
RESERVED_PARTS = 1


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _xml_field(body: bytes, field: str, what: str) -> str:
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError as exc:
        raise TransientError(f"{what}: the answer is not XML ({exc}): {body[:200]!r}") from exc
    if _local(root.tag) == "Error":
        # An XML API error can come with a 200 status: the request failed all the same.
        text = {_local(c.tag): c.text or "" for c in root}
        raise TransientError(f"{what}: {text.get('Code', '?')}: {text.get('Message', '')}")
    for node in root.iter():
        if _local(node.tag) == field and node.text:
            return node.text
    raise GcsError(f"{what}: the answer has no {field}: {body[:200]!r}")


def completion_body(etags: Sequence[str]) -> bytes:
    """The ``CompleteMultipartUpload`` document listing parts 1..n with their ETags."""
    parts = "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{escape(etag)}</ETag></Part>"
        for n, etag in enumerate(etags, start=1)
    )
    return f"<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>".encode()


class XmlMultipartUpload:
    """The requests of one multipart upload of ``name``, each under the bucket's retry policy.
    Thread-safe for :meth:`put_part` (each part's ETag goes under its own key)."""

    def __init__(self, objects: GcsObjects, name: str, upload_id: str | None = None) -> None:
        """``upload_id``: an upload begun elsewhere (to abort one a dead run left)."""
        self.objects = objects
        self.name = name
        self.url = google_seam.xml_object_url(objects.client, objects.bucket_name, name)
        self.upload_id = upload_id
        self.etags: dict[int, str] = {}

    def _what(self, action: str) -> str:
        return f"{action} {self.objects.url(self.name)}"

    def initiate(self) -> None:
        what = self._what("start a multipart upload of")
        op = self.objects.policy.start()

        def attempt() -> str:
            resp = self.objects.session.post(
                self.url,
                params={"uploads": ""},
                headers={"Content-Type": "application/octet-stream", "Content-Length": "0"},
                timeout=op.timeout(),
            )
            with resp:
                check_response(resp, what)
                return _xml_field(resp.content, "UploadId", what)

        self.upload_id = call_with_retry(attempt, what, self.objects.policy, operation=op)

    def put_part(self, index: int, data: memoryview) -> int | None:
        """Upload part ``index`` (0-based; part number ``index + 1``); its crc32c when checked."""
        number = index + 1
        what = self._what(f"upload part {number} of")
        sent = crc.value(data) if self.objects.checksums else None
        headers = {"Content-Type": "application/octet-stream"}
        if sent is not None:
            headers["x-goog-hash"] = f"crc32c={crc.to_gcs(sent)}"
        op = self.objects.policy.start()

        def attempt() -> str:
            TRAFFIC.add_sent(data.nbytes)  # every attempt puts the part on the wire
            resp = self.objects.session.put(
                self.url,
                params={"partNumber": str(number), "uploadId": self.upload_id},
                data=data,
                headers=headers,
                timeout=op.timeout(),
            )
            with resp:
                if resp.status_code == 400 and "BadDigest" in resp.text:
                    raise TransientError(f"{what}: refused as corrupted in flight (BadDigest)")
                check_response(resp, what)
                _check_part_hash(resp, sent, what)
                etag = resp.headers.get("ETag")
                if not etag:
                    raise GcsError(f"{what}: the answer carries no ETag")
                return str(etag)

        self.etags[index] = call_with_retry(attempt, what, self.objects.policy, operation=op)
        return sent

    def complete(self, parts: int, expected_crc: int | None) -> None:
        """Assemble parts 1..``parts``; with ``expected_crc`` (the parts' crc32cs combined), the
        object's crc32c must match it."""
        what = self._what(f"complete the multipart upload ({parts} parts) of")
        missing = [i + 1 for i in range(parts) if i not in self.etags]
        if missing:
            raise GcsError(f"{what}: parts {missing} have no ETag")
        body = completion_body([self.etags[i] for i in range(parts)])
        op = self.objects.policy.start()
        tries = 0

        def attempt() -> bool:
            """Whether the object's crc32c was already found to be the expected one."""
            nonlocal tries
            tries += 1
            resp = self.objects.session.post(
                self.url,
                params={"uploadId": self.upload_id},
                data=body,
                headers={"Content-Type": "application/xml"},
                timeout=op.timeout(),
            )
            with resp:
                if resp.status_code == 404 and tries > 1 and self._already_done(expected_crc):
                    return True  # an earlier attempt completed it; its answer was lost
                check_response(resp, what)
                _xml_field(resp.content, "Key", what)
                return False

        checked = call_with_retry(attempt, what, self.objects.policy, operation=op)
        if expected_crc is not None and self.objects.checksums and not checked:
            _, stored = self.objects.stat(self.name)
            if stored != expected_crc:
                raise IntegrityError(
                    f"{what}: the object's crc32c {crc.to_gcs(stored)} differs from the parts' "
                    f"combined {crc.to_gcs(expected_crc)}"
                )

    def _already_done(self, expected_crc: int | None) -> bool:
        if expected_crc is None:
            return False
        try:
            _, stored = self.objects.stat(self.name)
        except GcsError:
            return False
        return stored == expected_crc

    def abort(self, seconds: float) -> bool:
        """Abort the upload (its parts are gone with it), within ``seconds``; whether it is gone."""
        if self.upload_id is None:
            return True
        what = self._what(f"abort the multipart upload {self.upload_id} of")
        policy = discard_policy(seconds, self.objects.policy.stall_seconds)
        op = policy.start()

        def attempt() -> None:
            resp = self.objects.session.delete(
                self.url, params={"uploadId": self.upload_id}, timeout=op.timeout()
            )
            with resp:
                check_response(resp, what, ok=(200, 204, 404))

        try:
            call_with_retry(attempt, what, policy, operation=op)
        except GcsError as exc:
            log.warning("could not abort: %s (its parts stay until aborted)", exc)
            return False
        return True


def unfinished_uploads(
    objects: GcsObjects, prefix: str, *, page_size: int = 1000
) -> list[tuple[str, str]] | None:
    """``(name, upload id)`` of every multipart upload under ``prefix`` begun and neither
    completed nor aborted: a run killed mid-save leaves one, whose parts nobody sees in an object
    listing and GCS bills as objects until it is aborted. None when the server has no XML API
    (an emulator answers a plain 404)."""
    what = f"list the unfinished multipart uploads under {objects.url(prefix)}"
    url = google_seam.xml_bucket_url(objects.client, objects.bucket_name)
    found: list[tuple[str, str]] = []
    markers: dict[str, str] = {}
    while True:
        op = objects.policy.start()

        def attempt(markers: dict[str, str] = markers, op: Operation = op) -> bytes | None:
            params = {"uploads": "", "prefix": prefix, "max-uploads": str(page_size), **markers}
            resp = objects.session.get(url, params=params, timeout=op.timeout())
            with resp:
                if resp.status_code == 404 and not resp.text.lstrip().startswith("<"):
                    return None
                check_response(resp, what)
                return bytes(resp.content)

        body = call_with_retry(attempt, what, objects.policy, operation=op)
        if body is None:
            return None
        page = _listed_uploads(body, what)
        found.extend(page.uploads)
        if not page.truncated:
            return found
        markers = {"key-marker": page.next_key, "upload-id-marker": page.next_upload_id}


class _Page:
    def __init__(self) -> None:
        self.uploads: list[tuple[str, str]] = []
        self.truncated = False
        self.next_key = ""
        self.next_upload_id = ""


def _listed_uploads(body: bytes, what: str) -> _Page:
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError as exc:
        raise GcsError(f"{what}: the answer is not XML ({exc})") from exc
    page = _Page()
    for node in root:
        tag = _local(node.tag)
        if tag == "Upload":
            fields = {_local(c.tag): c.text or "" for c in node}
            page.uploads.append((fields.get("Key", ""), fields.get("UploadId", "")))
        elif tag == "IsTruncated":
            page.truncated = (node.text or "").strip().lower() == "true"
        elif tag == "NextKeyMarker":
            page.next_key = node.text or ""
        elif tag == "NextUploadIdMarker":
            page.next_upload_id = node.text or ""
    return page


def _check_part_hash(resp: requests.Response, sent: int | None, what: str) -> None:
    """GCS answers a part with the hashes of what it stored: they must be what was sent."""
    if sent is None:
        return
    for item in resp.headers.get("x-goog-hash", "").split(","):
        name, _, value = item.strip().partition("=")
        if name == "crc32c" and value:
            require_sent(stored_crc({"crc32c": value}, what), sent, what)


class MultipartUploadStream(PartedUploadStream):
    """The parts go into one XML API multipart upload, started with the first part; close
    completes it, abort aborts it. A short part may go out only if it is at least 5 MiB (GCS's
    minimum for every part but the last) and the part budget allows; smaller ones are gathered."""

    max_parts = MAX_PARTS
    min_short = MIN_PART_BYTES

    def __init__(self, objects: GcsObjects, name: str, **options: Unpack[StreamOptions]) -> None:
        part_size = options["part_size"]
        if part_size < MIN_PART_BYTES:
            raise ValueError(
                f"part_size must be >= {MIN_PART_BYTES} bytes for a multipart upload (GCS's "
                f"minimum part), got {part_size}"
            )
        super().__init__(objects, name, **options)
        self._upload = XmlMultipartUpload(objects, name)

    def _may_send_short(self, nbytes: int) -> bool:
        return nbytes >= MIN_PART_BYTES and self._short_budget_allows(MAX_PARTS, RESERVED_PARTS)

    def _before_first_part(self) -> None:
        self._upload.initiate()

    def _send_part(self, index: int, data: memoryview) -> int | None:
        return self._upload.put_part(index, data)

    def _assemble(self) -> None:
        self._upload.complete(len(self._sizes), self._combined_crc())

    def _discard(self, pool: ThreadPoolExecutor, *, failed: bool) -> bool:
        # A completed upload's parts are gone with the completion: only a failure has any.
        if failed and not self._upload.abort(self._discard_seconds):
            log.warning(
                "multipart upload %s of %s left open",
                self._upload.upload_id,
                self._objects.url(self._name),
            )
        return False
