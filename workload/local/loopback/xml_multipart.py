"""GCS's XML API multipart upload on loopback, in front of fake-gcs-server, which has none.

Google's Dataflux DCP writer (the peer bench/bench_peer.py compares our gcs backend with) and
google-cloud-storage's ``transfer_manager.upload_chunks_concurrently`` upload through the XML
multipart upload (https://cloud.google.com/storage/docs/multipart-uploads). No emulator implements
it, so this shim, a plug-in of :class:`~ckptbench.workload.local.loopback.proxy.LoopbackProxy`,
answers those requests itself and forwards every other request to the emulator unchanged. What the
clients send, when ``STORAGE_EMULATOR_HOST`` names the shim (google-cloud-storage's
``XMLMPUContainer`` and ``XMLMPUPart``; the object's URL is ``{host}/{bucket}/{quoted object}``):

- ``POST /{bucket}/{object}?uploads`` (``Content-Type`` of the object): answered 200 with an
  ``InitiateMultipartUploadResult`` (``Bucket``, ``Key``, ``UploadId``, in the S3 namespace the
  client looks the id up in);
- ``PUT /{bucket}/{object}?partNumber=N&uploadId=U``: the part, kept in a temporary file, never in
  memory; answered 200 with ``ETag`` (the part's quoted md5 hex) and ``x-goog-hash`` (crc32c and
  md5, which the client checks against its own). A part whose ``x-goog-hash`` crc32c or md5, or
  ``Content-MD5``, does not match its bytes is refused 400 ``BadDigest``; sending it again under
  the same number replaces it;
- ``POST /{bucket}/{object}?uploadId=U`` with a ``CompleteMultipartUpload`` body listing
  ``Part`` (``PartNumber``, ``ETag``) in ascending order: the listed parts, streamed one after the
  other from their files, become the object through the emulator's JSON API media upload;
  answered 200 ``CompleteMultipartUploadResult``. A part not uploaded or with another ETag is
  400 ``InvalidPart``, parts out of order 400 ``InvalidPartOrder``, a part but the last smaller
  than GCS's minimum (5 MiB; ``min_part_bytes``) 400 ``EntityTooSmall``;
- ``DELETE /{bucket}/{object}?uploadId=U``: aborts, 204;
- ``GET /{bucket}?uploads`` (``prefix``, ``max-uploads``, ``key-marker``, ``upload-id-marker``):
  the open uploads under the prefix, ``ListMultipartUploadsResult`` with ``Upload`` (``Key``,
  ``UploadId``), sorted by key then id, in pages (``IsTruncated``, ``NextKeyMarker``,
  ``NextUploadIdMarker``);
- an unknown upload id: 404 ``NoSuchUpload``.

Assembling costs a copy: every byte of the parts is sent again to the emulator, which writes the
object anew. GCS assembles without that copy. Our own gcs backend pays the same kind of copy on
the emulator, whose compose copies every source byte (GCS's does not), so in a comparison through
this shim both writers pay one extra pass over their bytes that GCS would not charge.
Only the object's content type is kept from the initiation; metadata headers are not carried.
The parts' files are deleted on complete, abort and when the shim stops.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import shutil
import tempfile
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from ckptbench.workload.local.loopback.proxy import Answer, Connection, Exchange, LoopbackProxy
from ckptbench.workload.storage.gcs import crc

_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
_SLICE = 1 << 20


@dataclass
class _Part:
    path: Path
    size: int
    md5: bytes
    crc32c: bytes

    @property
    def etag(self) -> str:
        return f'"{self.md5.hex()}"'


@dataclass
class _Upload:
    bucket: str
    key: str
    content_type: str
    folder: Path
    parts: dict[int, _Part] = field(default_factory=dict)


class XmlMultipartShim(LoopbackProxy):
    """The shim; ``uploads_open`` and ``part_files`` say what it holds (the tests check both)."""

    def __init__(
        self,
        upstream: str,
        *,
        timeout: float = 600,
        min_part_bytes: int = 5 * 1024 * 1024,
        scratch: str | None = None,
    ) -> None:
        """``scratch``: the folder the parts' files go under (default: the temporary folder);
        a benchmark puts them in memory, where the emulator keeps its objects, so that writing
        them back to a disk is not what it measures."""
        super().__init__(upstream, self, name="xml-multipart", timeout=timeout)
        self._scratch = scratch
        self.min_part_bytes = min_part_bytes
        self._uploads: dict[str, _Upload] = {}
        self._state = threading.Lock()
        self._root: Path | None = None

    def exchange(self, method: str, url: str) -> Exchange:
        parsed = urllib.parse.urlsplit(url)
        query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
        bucket, _, key = parsed.path.lstrip("/").partition("/")
        if bucket and not key and method == "GET" and "uploads" in query:
            return _List(self, bucket, {k: v[0] for k, v in query.items()})
        if not bucket or not key:
            return Exchange()
        key = urllib.parse.unquote(key)
        if method == "POST" and "uploads" in query:
            return _Initiate(self, bucket, key)
        upload_id = query.get("uploadId", [None])[0]
        if upload_id is None:
            return Exchange()
        if method == "PUT" and "partNumber" in query:
            return _PutPart(self, upload_id, query["partNumber"][0])
        if method == "POST":
            return _Complete(self, upload_id)
        if method == "DELETE":
            return _Abort(self, upload_id)
        return Exchange()

    @contextmanager
    def running(self) -> Iterator[Self]:
        self._root = Path(tempfile.mkdtemp(prefix="xml-multipart-", dir=self._scratch))
        try:
            with super().running():
                yield self
        finally:
            with self._state:
                self._uploads.clear()
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    @property
    def uploads_open(self) -> int:
        with self._state:
            return len(self._uploads)

    def part_files(self) -> list[Path]:
        return sorted(self._root.rglob("*")) if self._root is not None else []

    def open_upload(self, bucket: str, key: str, content_type: str) -> str:
        assert self._root is not None, "the shim is not running"
        upload_id = uuid.uuid4().hex
        folder = self._root / upload_id
        folder.mkdir()
        with self._state:
            self._uploads[upload_id] = _Upload(bucket, key, content_type, folder)
        return upload_id

    def open_in(self, bucket: str) -> list[tuple[str, str]]:
        """``(key, upload id)`` of the bucket's open uploads, sorted."""
        with self._state:
            return sorted((u.key, i) for i, u in self._uploads.items() if u.bucket == bucket)

    def upload(self, upload_id: str) -> _Upload | None:
        with self._state:
            return self._uploads.get(upload_id)

    def close_upload(self, upload_id: str) -> _Upload | None:
        with self._state:
            upload = self._uploads.pop(upload_id, None)
        if upload is not None:
            shutil.rmtree(upload.folder, ignore_errors=True)
        return upload

    def store(self, upload: _Upload, number: int, part: _Part) -> None:
        with self._state:
            old = upload.parts.get(number)
            upload.parts[number] = part
        if old is not None and old.path != part.path:
            old.path.unlink(missing_ok=True)

    def create_object(self, upload: _Upload, parts: list[_Part]) -> Answer:
        """The parts, one after the other, as one media upload to the emulator's JSON API."""
        name = urllib.parse.quote(upload.key, safe="")
        bucket = urllib.parse.quote(upload.bucket, safe="")
        url = f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}"
        headers = {
            "Content-Type": upload.content_type,
            "Content-Length": str(sum(p.size for p in parts)),
        }
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", url, body=_stream(parts), headers=headers)
            resp = conn.getresponse()
            return Answer(resp.status, resp.getheaders(), resp.read())
        finally:
            conn.close()


def _stream(parts: list[_Part]) -> Iterator[bytes]:
    for part in parts:
        with part.path.open("rb") as f:
            while piece := f.read(_SLICE):
                yield piece


def _xml(root: str, fields: dict[str, str], *, ns: bool = True) -> bytes:
    xmlns = f' xmlns="{_NS}"' if ns else ""
    inner = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in fields.items())
    text = f"<?xml version='1.0' encoding='UTF-8'?><{root}{xmlns}>{inner}</{root}>"
    return text.encode()


def _xml_answer(status: int, body: bytes) -> Answer:
    return Answer(status, [("Content-Type", "application/xml; charset=UTF-8")], body)


def error(status: int, code: str, message: str, details: str = "") -> Answer:
    """An XML API error: google-cloud-storage reads Code, Message and Details of a 400."""
    fields = {"Code": code, "Message": message, "Details": details or message}
    return _xml_answer(status, _xml("Error", fields, ns=False))


def _no_upload(upload_id: str) -> Answer:
    return error(404, "NoSuchUpload", f"no multipart upload with id {upload_id!r}")


class _Initiate(Exchange):
    def __init__(self, shim: XmlMultipartShim, bucket: str, key: str) -> None:
        self.shim, self.bucket, self.key = shim, bucket, key
        self.content_type = "application/octet-stream"

    def receive(self, conn: Connection, length: int) -> bytes | None:
        self.content_type = conn.headers.get("Content-Type") or self.content_type
        return super().receive(conn, length)

    def answer_here(self, body: bytes) -> Answer | None:
        upload_id = self.shim.open_upload(self.bucket, self.key, self.content_type)
        fields = {"Bucket": self.bucket, "Key": self.key, "UploadId": upload_id}
        return _xml_answer(200, _xml("InitiateMultipartUploadResult", fields))


class _PutPart(Exchange):
    """Streams the part's body into a file, hashing it on the way; answers from the hashes."""

    def __init__(self, shim: XmlMultipartShim, upload_id: str, number: str) -> None:
        self.shim, self.upload_id, self.number = shim, upload_id, number
        self.result: Answer | None = None

    def receive(self, conn: Connection, length: int) -> bytes | None:
        upload = self.shim.upload(self.upload_id)
        if not self.number.isdigit() or not 1 <= int(self.number) <= 10000:
            self.result = error(400, "InvalidArgument", f"partNumber {self.number!r}: 1-10000")
        if upload is None or self.result is not None:
            conn.read(length)  # the body is read, so the connection stays usable
            self.result = self.result or _no_upload(self.upload_id)
            return b""
        path = upload.folder / f"{int(self.number):05d}-{uuid.uuid4().hex[:8]}"
        md5, crc32c, got = hashlib.md5(), 0, 0
        with path.open("wb") as f:
            while got < length:
                piece = conn.read(min(_SLICE, length - got))
                if not piece:
                    path.unlink(missing_ok=True)
                    return None  # the client went away mid-body
                f.write(piece)
                md5.update(piece)
                crc32c = crc.value(piece, crc32c)
                got += len(piece)
        part = _Part(path, got, md5.digest(), crc32c.to_bytes(4, "big"))
        wrong = _digest_mismatch(conn, part)
        if wrong:
            path.unlink(missing_ok=True)
            self.result = error(400, "BadDigest", wrong)
            return b""
        self.shim.store(upload, int(self.number), part)
        sent = ",".join(
            f"{name}={base64.b64encode(value).decode()}"
            for name, value in (("crc32c", part.crc32c), ("md5", part.md5))
        )
        self.result = Answer(200, [("ETag", part.etag), ("x-goog-hash", sent)], b"")
        return b""

    def answer_here(self, body: bytes) -> Answer | None:
        assert self.result is not None
        return self.result


def _digest_mismatch(conn: Connection, part: _Part) -> str:
    """Why the part's bytes differ from a digest the client sent with them, or ''."""
    claims: list[tuple[str, str]] = []
    for value in conn.headers.get_all("x-goog-hash") or []:
        for item in value.split(","):
            name, _, digest = item.strip().partition("=")
            claims.append((name.strip().lower(), digest.strip()))
    if conn.headers.get("Content-MD5"):
        claims.append(("md5", conn.headers["Content-MD5"].strip()))
    actual = {"crc32c": part.crc32c, "md5": part.md5}
    for name, digest in claims:
        if name in actual and digest != base64.b64encode(actual[name]).decode():
            return (
                f"the part's {name} is {base64.b64encode(actual[name]).decode()}, "
                f"the request said {digest}"
            )
    return ""


class _Complete(Exchange):
    def __init__(self, shim: XmlMultipartShim, upload_id: str) -> None:
        self.shim, self.upload_id = shim, upload_id

    def answer_here(self, body: bytes) -> Answer | None:
        upload = self.shim.upload(self.upload_id)
        if upload is None:
            return _no_upload(self.upload_id)
        try:
            listed = _listed_parts(body)
        except (ElementTree.ParseError, ValueError) as exc:
            return error(400, "MalformedXML", f"CompleteMultipartUpload: {exc}")
        if not listed:
            return error(400, "MalformedXML", "CompleteMultipartUpload lists no Part")
        numbers = [n for n, _ in listed]
        if numbers != sorted(set(numbers)):
            return error(400, "InvalidPartOrder", f"parts must ascend, got {numbers}")
        parts = []
        for number, etag in listed:
            part = upload.parts.get(number)
            if part is None or etag.strip('"') != part.etag.strip('"'):
                return error(400, "InvalidPart", f"part {number} with ETag {etag} was not uploaded")
            parts.append(part)
        small = [
            n
            for (n, _), p in zip(listed[:-1], parts, strict=False)
            if p.size < self.shim.min_part_bytes
        ]
        if small:
            return error(
                400,
                "EntityTooSmall",
                f"parts {small} are smaller than {self.shim.min_part_bytes} bytes and not last",
            )
        made = self.shim.create_object(upload, parts)
        if made.status != 200:
            return made  # the emulator's refusal; the upload stays open for a retry or an abort
        self.shim.close_upload(self.upload_id)
        fields = {
            "Location": f"{self.shim.url}/{upload.bucket}/{urllib.parse.quote(upload.key)}",
            "Bucket": upload.bucket,
            "Key": upload.key,
            "ETag": f'"{hashlib.md5(b"".join(p.md5 for p in parts)).hexdigest()}-{len(parts)}"',
        }
        return _xml_answer(200, _xml("CompleteMultipartUploadResult", fields))


def _listed_parts(body: bytes) -> list[tuple[int, str]]:
    root = ElementTree.fromstring(body)
    out = []
    for node in root.iter():
        if node.tag.rpartition("}")[2] != "Part":
            continue
        got = {child.tag.rpartition("}")[2]: (child.text or "") for child in node}
        if "PartNumber" not in got or "ETag" not in got:
            raise ValueError("a Part needs PartNumber and ETag")
        out.append((int(got["PartNumber"]), got["ETag"]))
    return out


class _List(Exchange):
    def __init__(self, shim: XmlMultipartShim, bucket: str, query: dict[str, str]) -> None:
        self.shim, self.bucket, self.query = shim, bucket, query

    def answer_here(self, body: bytes) -> Answer | None:
        prefix = self.query.get("prefix", "")
        limit = int(self.query.get("max-uploads") or 1000)
        after = (self.query.get("key-marker", ""), self.query.get("upload-id-marker", ""))
        listed = [u for u in self.shim.open_in(self.bucket) if u[0].startswith(prefix)]
        listed = [u for u in listed if u > after] if after != ("", "") else listed
        page, more = listed[:limit], len(listed) > limit
        uploads = "".join(
            f"<Upload><Key>{escape(key)}</Key><UploadId>{upload_id}</UploadId></Upload>"
            for key, upload_id in page
        )
        tail = (
            f"<NextKeyMarker>{escape(page[-1][0])}</NextKeyMarker>"
            f"<NextUploadIdMarker>{page[-1][1]}</NextUploadIdMarker>"
            if more
            else ""
        )
        text = (
            f"<?xml version='1.0' encoding='UTF-8'?><ListMultipartUploadsResult xmlns=\"{_NS}\">"
            f"<Bucket>{escape(self.bucket)}</Bucket><Prefix>{escape(prefix)}</Prefix>"
            f"<IsTruncated>{str(more).lower()}</IsTruncated>{tail}{uploads}"
            "</ListMultipartUploadsResult>"
        )
        return _xml_answer(200, text.encode())


class _Abort(Exchange):
    def __init__(self, shim: XmlMultipartShim, upload_id: str) -> None:
        self.shim, self.upload_id = shim, upload_id

    def answer_here(self, body: bytes) -> Answer | None:
        if self.shim.close_upload(self.upload_id) is None:
            return _no_upload(self.upload_id)
        return Answer(204, [], b"")
