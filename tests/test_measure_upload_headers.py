"""Every media upload of the gcs backend sends its body's crc32c in ``X-Goog-Hash``.

GCS rejects a body that does not match the crc32c sent with it, so the header is what keeps a
body corrupted on its way from being stored; comparing the crc32c the server stored afterwards
catches it too, but only after the upload (the emulator accepts a request without the header, so
only the request itself shows the header's absence). Small objects (the ``.metadata``, a rank's
short file) go by media upload, and so do the parts of a composite upload.

Two real worker processes save and load with the gcs backend through a loopback proxy in front of
the GCS emulator; the proxy keeps each request's headers and its body's crc32c, computed here.
"""

from __future__ import annotations

import base64
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import google_crc32c
import pytest

from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.local.loopback.proxy import Connection, Exchange, LoopbackProxy
from tests import workers

pytestmark = pytest.mark.timeout(180)


@dataclass
class Request:
    method: str
    query: dict[str, str]
    headers: dict[str, str]  # names lower-cased
    body_crc32c: str  # as GCS writes it: base64 of the big-endian value


class _Keep(Exchange):
    def __init__(self, log: list[Request], method: str, url: str) -> None:
        self.log = log
        self.method = method
        self.query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))

    def receive(self, conn: Connection, length: int) -> bytes | None:
        body = super().receive(conn, length)
        if body is not None:
            crc = base64.b64encode(int(google_crc32c.value(body)).to_bytes(4, "big")).decode()
            headers = {k.lower(): v for k, v in conn.headers.items()}
            self.log.append(Request(self.method, self.query, headers, crc))
        return body


class RecordingProxy:
    def __init__(self) -> None:
        self.requests: list[Request] = []

    def exchange(self, method: str, url: str) -> Exchange:
        return _Keep(self.requests, method, url)


def _hash_values(header: str) -> dict[str, str]:
    """``crc32c=AAAA==,md5=...`` as a dict (the names are case-insensitive)."""
    pairs = (item.strip().partition("=") for item in header.split(",") if item.strip())
    return {name.lower(): value for name, _, value in pairs}


def test_every_media_upload_carries_its_body_s_crc32c(
    gcs_emulator: GcsEmulator, gcs_bucket: str, tmp_path: Path
) -> None:
    # 1 MiB parts: rank 0's two tensors (1.6 MB) go as a composite upload of media-uploaded parts,
    # rank 1's one tensor (0.8 MB) as one media upload, and the .metadata as another.
    recorder = RecordingProxy()
    proxy = LoopbackProxy(gcs_emulator.url, recorder, name="header-log", timeout=60)
    config = workers.small_config(
        f"gs://{gcs_bucket}/bench",
        backend="gcs",
        layer_size=200,
        padding_size=3,
        warmup_samples=0,
        sample_count=1,
        threads=2,
        part_size_bytes=1024 * 1024,
    )
    assert config.checksums
    with proxy.running():
        ranks = workers.run(config, tmp_path, emulator_url=proxy.url)
    assert [w.proc.returncode for w in ranks] == [0, 0], workers.logs(ranks)

    media = [r for r in recorder.requests if r.query.get("uploadType") == "media"]
    names = sorted(r.query["name"].rsplit("/", 2)[-1] for r in media)
    assert ".metadata.tmp" in names  # DCP writes it under a temporary name, then renames it
    assert "__1_0.distcp" in names
    assert sum(".distcp.parts/" in r.query["name"] for r in media) >= 2, names
    for r in media:
        sent = _hash_values(r.headers.get("x-goog-hash", ""))
        assert sent.get("crc32c") == r.body_crc32c, (r.query["name"], r.headers.get("x-goog-hash"))
