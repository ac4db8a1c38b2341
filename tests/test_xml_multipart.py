"""The XML multipart upload shim (workload/local/loopback/xml_multipart.py) over a real
fake-gcs-server process, driven by google-cloud-storage's own clients."""

from __future__ import annotations

import base64
import hashlib
import http.client
import os
import urllib.parse
from pathlib import Path
from typing import Any

import google.resumable_media.requests as _media
import pytest
from google.auth.credentials import AnonymousCredentials
from google.auth.transport.requests import AuthorizedSession
from google.cloud import storage
from google.cloud.storage import transfer_manager

from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.local.loopback.xml_multipart import XmlMultipartShim
from ckptbench.workload.storage.gcs import crc
from ckptbench.workload.storage.gcs.client import make_client

MiB = 1 << 20

pytestmark = pytest.mark.timeout(120)
# google-resumable-media's XML multipart classes, as google-cloud-storage's helpers use them
# (the package has no type hints).
XMLMPUContainer: Any = _media.XMLMPUContainer
XMLMPUPart: Any = _media.XMLMPUPart


@pytest.fixture
def via_shim(shim: XmlMultipartShim, monkeypatch: pytest.MonkeyPatch) -> storage.Client:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", shim.url)
    return make_client(pool_size=8)


def direct(emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch) -> storage.Client:
    """A client of the emulator itself, past the shim: what the shim made is really stored."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.url)
    return make_client(pool_size=2)


def session() -> AuthorizedSession:
    return AuthorizedSession(AnonymousCredentials())  # type: ignore[no-untyped-call]


def request(
    url: str, method: str, path: str, body: bytes = b"", **headers: str
) -> tuple[int, bytes]:
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname or "", parsed.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def crc32c_b64(data: bytes) -> str:
    return base64.b64encode(crc.value(data).to_bytes(4, "big")).decode()


def test_upload_chunks_concurrently_assembles_the_parts_in_order(
    via_shim: storage.Client,
    shim: XmlMultipartShim,
    gcs_emulator: GcsEmulator,
    gcs_bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = os.urandom(15 * MiB + 12345)  # three whole chunks of GCS's minimum and a short last
    source = tmp_path / "source"
    source.write_bytes(data)
    blob = via_shim.bucket(gcs_bucket).blob("dir/ob ject+1")  # a name that needs quoting
    transfer_manager.upload_chunks_concurrently(
        str(source), blob, chunk_size=5 * MiB, max_workers=4, checksum="crc32c"
    )
    assert shim.uploads_open == 0
    assert shim.part_files() == []
    got = direct(gcs_emulator, monkeypatch).bucket(gcs_bucket).blob("dir/ob ject+1")
    assert got.download_as_bytes(checksum=None) == data


def test_a_wrong_part_etag_or_order_is_refused_and_a_right_list_completes(
    shim: XmlMultipartShim, gcs_bucket: str, gcs_emulator: GcsEmulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    base = f"/{gcs_bucket}/obj"
    status, body = request(shim.url, "POST", base + "?uploads")
    assert status == 200
    upload_id = body.decode().split("<UploadId>")[1].split("</UploadId>")[0]
    pieces = [b"a" * 1000, b"b" * 10, b"c" * 500]
    for n, piece in enumerate(pieces, 1):
        status, _ = request(shim.url, "PUT", f"{base}?partNumber={n}&uploadId={upload_id}", piece)
        assert status == 200
    etags = [hashlib.md5(p).hexdigest() for p in pieces]

    def complete(parts: list[tuple[int, str]]) -> tuple[int, bytes]:
        listed = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>\"{e}\"</ETag></Part>"
                         for n, e in parts)  # fmt: skip
        xml = f"<CompleteMultipartUpload>{listed}</CompleteMultipartUpload>".encode()
        return request(shim.url, "POST", f"{base}?uploadId={upload_id}", xml)

    status, body = complete([])  # GCS's reference: every element of the body is required
    assert (status, b"<Code>MalformedXML</Code>" in body) == (400, True)
    # Every part but the last must be at least 5 MiB, as on GCS.
    status, body = complete([(1, etags[0]), (3, etags[2])])
    assert (status, b"<Code>EntityTooSmall</Code>" in body) == (400, True)
    assert shim.uploads_open == 1  # a refused completion leaves the upload open
    status, body = complete([(3, etags[2])])  # a lone part is the last: any size
    assert status == 200, body
    status, body = request(shim.url, "POST", base + "?uploads")
    upload_id = body.decode().split("<UploadId>")[1].split("</UploadId>")[0]
    for n, piece in enumerate(pieces, 1):
        status, _ = request(shim.url, "PUT", f"{base}?partNumber={n}&uploadId={upload_id}", piece)
        assert status == 200
    shim.min_part_bytes = 1  # the checks below are about ETags and order, with small parts
    status, body = complete([])
    assert (status, b"<Code>MalformedXML</Code>" in body) == (400, True)
    status, body = complete([(1, etags[0]), (2, etags[0]), (3, etags[2])])
    assert (status, b"<Code>InvalidPart</Code>" in body) == (400, True)
    status, body = complete([(2, etags[1]), (1, etags[0])])
    assert (status, b"<Code>InvalidPartOrder</Code>" in body) == (400, True)
    status, body = complete([(1, etags[0]), (3, etags[2])])  # a part may be left out
    assert status == 200, body
    got = direct(gcs_emulator, monkeypatch).bucket(gcs_bucket).blob("obj")
    assert got.download_as_bytes(checksum=None) == pieces[0] + pieces[2]
    assert shim.uploads_open == 0 and shim.part_files() == []


def test_abort_leaves_nothing(
    shim: XmlMultipartShim, gcs_bucket: str, gcs_emulator: GcsEmulator, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    source = tmp_path / "part"
    source.write_bytes(os.urandom(MiB))
    url = f"{shim.url}/{gcs_bucket}/aborted"
    container = XMLMPUContainer(url, str(source))
    container.initiate(session(), content_type="application/octet-stream")
    XMLMPUPart(url, container.upload_id, str(source), 0, MiB, 1, checksum="crc32c").upload(
        session()
    )
    assert len(shim.part_files()) == 2  # the upload's folder and its part
    container.cancel(session())
    assert shim.uploads_open == 0
    assert shim.part_files() == []
    blobs = direct(gcs_emulator, monkeypatch).list_blobs(gcs_bucket)
    assert [b.name for b in blobs] == []
    path = f"/{gcs_bucket}/aborted?uploadId={container.upload_id}"
    status, body = request(shim.url, "DELETE", path)
    assert (status, b"<Code>NoSuchUpload</Code>" in body) == (404, True)


def test_an_unknown_upload_id_is_404_on_every_step(shim: XmlMultipartShim, gcs_bucket: str) -> None:
    base = f"/{gcs_bucket}/nothing"
    for method, query, body in (
        ("PUT", "?partNumber=1&uploadId=nope", b"data"),
        ("POST", "?uploadId=nope", b"<CompleteMultipartUpload/>"),
        ("DELETE", "?uploadId=nope", b""),
    ):
        status, answer = request(shim.url, method, base + query, body)
        assert (status, b"<Code>NoSuchUpload</Code>" in answer) == (404, True), method


@pytest.mark.parametrize("header", ["x-goog-hash", "Content-MD5"])
def test_a_part_with_a_wrong_digest_is_refused_and_a_right_one_kept(
    shim: XmlMultipartShim, gcs_bucket: str, header: str
) -> None:
    base = f"/{gcs_bucket}/checked"
    status, body = request(shim.url, "POST", base + "?uploads")
    upload_id = body.decode().split("<UploadId>")[1].split("</UploadId>")[0]
    data = os.urandom(64 * 1024)
    right = (
        f"crc32c={crc32c_b64(data)}"
        if header == "x-goog-hash"
        else base64.b64encode(hashlib.md5(data).digest()).decode()
    )
    wrong = (
        f"crc32c={crc32c_b64(data + b'!')}"
        if header == "x-goog-hash"
        else base64.b64encode(hashlib.md5(data + b"!").digest()).decode()
    )
    path = f"{base}?partNumber=1&uploadId={upload_id}"
    status, answer = request(shim.url, "PUT", path, data, **{header: wrong})
    assert (status, b"<Code>BadDigest</Code>" in answer) == (400, True)
    assert len(shim.part_files()) == 1, "the refused part's file was kept"
    status, answer = request(shim.url, "PUT", path, data, **{header: right})
    assert status == 200, answer
    assert len(shim.part_files()) == 2
    request(shim.url, "DELETE", f"{base}?uploadId={upload_id}")


def test_the_client_sees_the_part_hash_and_rejects_a_part_corrupted_on_the_way(
    shim: XmlMultipartShim, gcs_bucket: str, tmp_path: Path
) -> None:
    """google-cloud-storage checks each part's crc32c against the shim's x-goog-hash answer:
    a part that reached the shim with other bytes than the client sent fails the upload."""
    from google.resumable_media.common import DataCorruption

    source = tmp_path / "part"
    source.write_bytes(os.urandom(100_000))
    url = f"{shim.url}/{gcs_bucket}/client-checked"
    container = XMLMPUContainer(url, str(source))
    container.initiate(session(), content_type="application/octet-stream")
    good = XMLMPUPart(url, container.upload_id, str(source), 0, 50_000, 1, checksum="crc32c")
    good.upload(session())
    assert good.etag == f'"{hashlib.md5(source.read_bytes()[:50_000]).hexdigest()}"'

    class Corrupting(XMLMPUPart):  # type: ignore[misc]
        def _prepare_upload_request(self) -> tuple[str, str, bytes, dict[str, str]]:
            method, part_url, payload, headers = super()._prepare_upload_request()
            assert isinstance(payload, bytes)
            return method, part_url, payload[:-1] + bytes([payload[-1] ^ 1]), headers

    bad = Corrupting(url, container.upload_id, str(source), 50_000, 100_000, 2, checksum="crc32c")
    with pytest.raises(DataCorruption):
        bad.upload(session())
    container.cancel(session())


def test_other_requests_pass_through_unchanged(
    via_shim: storage.Client, shim: XmlMultipartShim, gcs_bucket: str
) -> None:
    data = os.urandom(3 * MiB)
    blob = via_shim.bucket(gcs_bucket).blob("plain")
    before = shim.requests
    blob.upload_from_string(data, content_type="application/x-test")
    assert blob.download_as_bytes() == data  # crc32c checked by the client
    meta = via_shim.bucket(gcs_bucket).get_blob("plain")
    assert meta is not None and meta.content_type == "application/x-test"
    assert meta.size == len(data)
    assert shim.requests - before >= 3, "the requests did not go through the shim"
    # Raw requests answer through the shim as they do from the emulator, a 404 included.
    for path in (f"/download/storage/v1/b/{gcs_bucket}/o/plain?alt=media", f"/{gcs_bucket}/plain"):
        assert request(shim.url, "GET", path) == request(shim.upstream, "GET", path)


def test_stopping_deletes_the_parts_of_uploads_left_open(
    gcs_emulator: GcsEmulator, gcs_bucket: str
) -> None:
    with XmlMultipartShim(gcs_emulator.url, timeout=60).running() as shim:
        _, body = request(shim.url, "POST", f"/{gcs_bucket}/left?uploads")
        upload_id = body.decode().split("<UploadId>")[1].split("</UploadId>")[0]
        path = f"/{gcs_bucket}/left?partNumber=1&uploadId={upload_id}"
        assert request(shim.url, "PUT", path, b"part")[0] == 200
        files = shim.part_files()
        assert len(files) == 2 and all(f.exists() for f in files)
    assert not any(f.exists() for f in files)
    assert not files[0].parent.exists(), "the shim's temporary folder outlived it"
