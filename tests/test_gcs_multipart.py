"""The gcs backend's XML multipart upload scheme, against a real fake-gcs-server behind the shim
(workload/local/loopback/xml_multipart.py), which refuses what GCS refuses: a part but the last
under 5 MiB, a part whose crc32c is not its bytes', parts listed out of order or with wrong
ETags."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.contract.choices import UploadScheme
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.local.loopback.xml_multipart import XmlMultipartShim
from ckptbench.workload.storage.gcs.backend import (
    GcsStorageReader,
    GcsStorageWriter,
    part_size_for,
)
from ckptbench.workload.storage.gcs.client import make_client
from ckptbench.workload.storage.gcs.multipart import (
    MAX_PARTS,
    MIN_PART_BYTES,
    MultipartUploadStream,
)
from ckptbench.workload.storage.gcs.objects import GcsObjects
from ckptbench.workload.storage.retry import GcsError, IntegrityError, RetryPolicy
from tests import workers
from tests.fault_proxy import FaultProxy, Rule

MiB = 1 << 20
pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("quiet_dcp")]
QUICK = RetryPolicy(stall_seconds=5.0, deadline_seconds=30.0, base_delay=0.05, max_delay=0.5)


def objects_at(
    url: str, bucket: str, monkeypatch: pytest.MonkeyPatch, policy: RetryPolicy = QUICK
) -> GcsObjects:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    return GcsObjects(make_client(pool_size=8), bucket, policy)


def stored(emulator: GcsEmulator, bucket: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every object in the bucket, asked of the emulator past the shim."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.url)
    return sorted(b.name for b in make_client(pool_size=2).list_blobs(bucket))


def owned(view: memoryview) -> object:
    return view  # the test's buffers outlive the stream


def write_like_torch_save(stream: MultipartUploadStream, payloads: list[bytes]) -> bytes:
    """Zip-like framing between payloads, as torch.save writes them; returns every byte sent."""
    sent = bytearray()
    for i, payload in enumerate(payloads):
        for piece in (b"PK\x03\x04" + bytes(60), f"data/{i}".encode(), bytes(i % 64)):
            stream.write(piece)
            sent += piece
        stream.write(payload)
        sent += payload
    stream.write(b"PK\x05\x06" + bytes(18))
    return bytes(sent + b"PK\x05\x06" + bytes(18))


def test_a_stream_becomes_one_object_with_every_part_but_the_last_at_least_5_mib(
    shim: XmlMultipartShim, gcs_emulator: GcsEmulator, gcs_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    objects = objects_at(shim.url, gcs_bucket, monkeypatch)
    # Payloads below, at and above the part size and the 5 MiB minimum, sent without a copy.
    sizes = [3 * MiB, 7 * MiB + 5, 12 * MiB, 100_000, 5 * MiB, 6 * MiB - 1, 2 * MiB]
    payloads = [os.urandom(n) for n in sizes]
    stream = MultipartUploadStream(
        objects, "ckpt/__0_0.distcp", threads=4, part_size=6 * MiB, keepalive=owned
    )
    sent = write_like_torch_save(stream, payloads)
    stream.close()
    parts = stream.part_sizes
    assert len(parts) >= 5 and sum(parts) == len(sent)
    assert all(n >= MIN_PART_BYTES for n in parts[:-1]), parts
    assert objects.read_all("ckpt/__0_0.distcp") == sent
    assert shim.uploads_open == 0
    # No temporary object and no compose: the object is all there is.
    assert stored(gcs_emulator, gcs_bucket, monkeypatch) == ["ckpt/__0_0.distcp"]


def test_framing_before_a_payload_joins_the_first_of_its_even_parts(
    shim: XmlMultipartShim, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The zip records before a tensor cannot go out alone (under 5 MiB): they and the payload go
    # as the fewest even parts (two of 20 MiB, not 32 + 8 MiB, whose short part would run alone
    # after the long one); only what joins the records is copied, the rest goes from the memory.
    objects = objects_at(shim.url, gcs_bucket, monkeypatch)
    stream = MultipartUploadStream(
        objects, "topped", threads=2, part_size=32 * MiB, keepalive=owned
    )
    payload = os.urandom(40 * MiB)
    stream.write(b"PK" + bytes(98))
    stream.write(payload)
    stream.close()
    assert stream.part_sizes == [20 * MiB + 50, 20 * MiB + 50]
    # 100 bytes of records, then 7 MiB: under 5 MiB each even half, so topped up to 5 MiB.
    stream = MultipartUploadStream(objects, "min", threads=2, part_size=6 * MiB, keepalive=owned)
    stream.write(bytes(100))
    stream.write(bytes(7 * MiB))
    stream.close()
    assert stream.part_sizes == [5 * MiB, 2 * MiB + 100]
    # 10 MiB less a byte in 8 MiB parts: even halves would leave one a byte under 5 MiB, which
    # GCS refuses for any part but the last, so a whole part goes and the rest is gathered.
    stream = MultipartUploadStream(objects, "odd", threads=2, part_size=8 * MiB, keepalive=owned)
    stream.write(bytes(10 * MiB - 1))
    stream.close()
    assert stream.part_sizes == [8 * MiB, 2 * MiB - 1]
    assert objects.read_all("topped") == b"PK" + bytes(98) + payload


def test_an_abort_ends_the_upload_and_leaves_nothing(
    shim: XmlMultipartShim, gcs_emulator: GcsEmulator, gcs_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    objects = objects_at(shim.url, gcs_bucket, monkeypatch)
    stream = MultipartUploadStream(objects, "aborted", threads=2, part_size=5 * MiB)
    stream.write(os.urandom(16 * MiB))
    assert shim.uploads_open == 1 and len(stream.part_sizes) == 3
    stream.abort()
    assert shim.uploads_open == 0
    assert [p for p in shim.part_files() if p.is_file()] == []
    assert stored(gcs_emulator, gcs_bucket, monkeypatch) == []


def test_a_part_size_below_gcs_minimum_is_refused_naming_it(
    shim: XmlMultipartShim, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = objects_at(shim.url, gcs_bucket, monkeypatch)
    with pytest.raises(ValueError, match=r"part_size must be >= 5242880 .* got 1048576"):
        MultipartUploadStream(objects, "x", threads=2, part_size=MiB)


@pytest.mark.parametrize(
    ("scheme", "expected_bytes", "requested", "part"),
    [
        # The floor: GCS's 5 MiB, whatever was asked (a composite upload takes any size).
        (UploadScheme.MULTIPART, 64 * MiB, MiB, MIN_PART_BYTES),
        (UploadScheme.COMPOSE, 64 * MiB, MiB, MiB),
        # 400 GiB in one object: parts grow to stay within 10,000 (one kept for the last).
        (UploadScheme.MULTIPART, 400 << 30, 32 * MiB, -(-(400 << 30) // (MAX_PARTS - 2))),
        (UploadScheme.COMPOSE, 400 << 30, 32 * MiB, -(-(400 << 30) // (1024 - 3))),
    ],
)
def test_part_size_follows_each_schemes_limits(
    scheme: UploadScheme, expected_bytes: int, requested: int, part: int
) -> None:
    assert part_size_for(requested, expected_bytes, 8, scheme) == part


def test_a_shard_no_part_size_can_hold_is_refused_with_the_numbers() -> None:
    with pytest.raises(ValueError, match="10000-part limit of a multipart upload"):
        part_size_for(32 * MiB, 60_000 << 30, 8, UploadScheme.MULTIPART)


@pytest.mark.parametrize(
    ("scheme", "emulator", "resolved"),
    [
        (UploadScheme.AUTO, None, UploadScheme.MULTIPART),
        (UploadScheme.AUTO, "http://127.0.0.1:4443", UploadScheme.COMPOSE),
        (UploadScheme.MULTIPART, "http://127.0.0.1:4443", UploadScheme.MULTIPART),
        (UploadScheme.COMPOSE, None, UploadScheme.COMPOSE),
    ],
)
def test_auto_is_multipart_on_gcs_and_compose_against_an_emulator(
    scheme: UploadScheme, emulator: str | None, resolved: UploadScheme
) -> None:
    assert scheme.resolve(emulator) is resolved


def faulty_upload(
    shim: XmlMultipartShim, bucket: str, rule: Rule, monkeypatch: pytest.MonkeyPatch,
    policy: RetryPolicy = QUICK,
) -> tuple[FaultProxy, Callable[[], tuple[bytes, GcsObjects]]]:  # fmt: skip
    proxy = FaultProxy(shim.url, [rule], seed=3)

    def upload() -> tuple[bytes, GcsObjects]:
        objects = objects_at(proxy.url, bucket, monkeypatch, policy)
        data = os.urandom(17 * MiB)
        with MultipartUploadStream(objects, "faulty", threads=3, part_size=5 * MiB) as stream:
            stream.write(data)
        return data, objects

    return proxy, upload


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        pytest.param(Rule("corrupt_request", "PUT", "partNumber=2"), "BadDigest", id="corrupt"),
        pytest.param(Rule("reset_request", "PUT", "partNumber="), "Connection", id="reset-part"),
        # The completion went through but its answer was cut: the retry finds the upload gone
        # (404) and the object there with the parts' crc32c.
        pytest.param(Rule("reset_response", "POST", "uploadId="), "Connection", id="lost-answer"),
        pytest.param(Rule("status", times=None, probability=0.2), "HTTP 5", id="20pct-503-429"),
    ],
)
def test_faults_on_every_request_are_survived(
    rule: Rule, why: str, shim: XmlMultipartShim, gcs_bucket: str,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    proxy, upload = faulty_upload(shim, gcs_bucket, rule, monkeypatch)
    with proxy.running():
        data, objects = upload()
        assert objects.read_all("faulty") == data
    assert rule.fired >= 1, proxy.fired
    assert any(why in r.getMessage() and "retrying" in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]
    assert shim.uploads_open == 0


def test_a_part_refused_for_good_aborts_the_upload_naming_the_object(
    shim: XmlMultipartShim, gcs_emulator: GcsEmulator, gcs_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    rule = Rule("status", "PUT", "partNumber=3", times=None, statuses=(503,))
    policy = RetryPolicy(stall_seconds=2.0, deadline_seconds=2.0, base_delay=0.05)
    proxy, upload = faulty_upload(shim, gcs_bucket, rule, monkeypatch, policy)
    with proxy.running(), pytest.raises(GcsError, match=r"part 3 of gs://.*/faulty"):
        upload()
    assert shim.uploads_open == 0
    assert stored(gcs_emulator, gcs_bucket, monkeypatch) == []


def test_an_object_assembled_from_other_bytes_than_the_parts_is_refused(
    shim: XmlMultipartShim, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = XmlMultipartShim.create_object

    def assemble_wrongly(self: XmlMultipartShim, upload: Any, parts: list[Any]) -> Any:
        first = parts[0].path
        data = bytearray(first.read_bytes())
        data[len(data) // 2] ^= 0xFF
        first.write_bytes(data)
        return original(self, upload, parts)

    monkeypatch.setattr(XmlMultipartShim, "create_object", assemble_wrongly)
    objects = objects_at(shim.url, gcs_bucket, monkeypatch)
    stream = MultipartUploadStream(objects, "wrong", threads=2, part_size=5 * MiB)
    stream.write(os.urandom(11 * MiB))
    with pytest.raises(IntegrityError, match=r"gs://.*/wrong.* differs from the parts' combined"):
        stream.close()


def test_dcp_round_trip_of_ten_thousand_tensors_through_multipart_uploads(
    shim: XmlMultipartShim, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", shim.url)
    # 10,000 tensors of 2 KiB: 20 MiB in one rank's object, so several parts of 5 MiB.
    sd = {f"t{i}": torch.arange(i, i + 512, dtype=torch.float32) for i in range(10_000)}
    cid = f"gs://{gcs_bucket}/many/ckpt.ckpt"
    options = {"threads": 4, "part_size_bytes": MIN_PART_BYTES}
    writer = GcsStorageWriter(cid, upload_scheme=UploadScheme.MULTIPART, **options)  # type: ignore[arg-type]
    assert writer.gcs.upload_scheme is UploadScheme.MULTIPART
    dcp_save(sd, storage_writer=writer)
    loaded = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp_load(loaded, storage_reader=GcsStorageReader(cid, **options))  # type: ignore[arg-type]
    assert all(torch.equal(loaded[k], v) for k, v in sd.items())
    assert shim.uploads_open == 0


def two_ranks(bucket: str, **overrides: object) -> WorkloadConfig:
    values: dict[str, object] = {
        "backend": "gcs",
        "upload_scheme": "multipart",
        "layer_size": 1600,  # 6.4 MB tensors, two per rank: parts of 5 MiB
        "padding_size": 4,
        "sample_count": 1,
        "warmup_samples": 0,
        "part_size_bytes": MIN_PART_BYTES,
        "threads": 4,
        "stall_seconds": 2.0,
        "request_deadline_seconds": 30.0,
    }
    values.update(overrides)
    return workers.small_config(f"gs://{bucket}/mp", **values)


def test_two_ranks_save_and_load_through_resets_and_503s_and_leave_nothing(
    shim: XmlMultipartShim, gcs_emulator: GcsEmulator, gcs_bucket: str,
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:  # fmt: skip
    rules = [
        Rule("reset_request", "PUT", "partNumber=2"),
        Rule("corrupt_request", "PUT", "partNumber=1"),
        Rule("status", times=None, probability=0.2),
    ]
    proxy = FaultProxy(shim.url, rules, seed=11)
    with proxy.running():
        ranks = workers.run(two_ranks(gcs_bucket), tmp_path, emulator_url=proxy.url, timeout=150)
    assert all(rule.fired >= 1 for rule in rules), proxy.fired
    for w in ranks:
        assert w.proc.returncode == 0, workers.logs(ranks)
        assert w.result.error is None and w.result.verified is True, workers.logs(ranks)
    retries = [line for w in ranks for line in w.stderr.splitlines() if "retrying in" in line]
    assert any("BadDigest" in line for line in retries), workers.logs(ranks)
    assert shim.uploads_open == 0
    assert [n for n in stored(gcs_emulator, gcs_bucket, monkeypatch) if "/checkpoints/" in n] == []


def test_a_run_whose_parts_fail_for_good_aborts_its_uploads_and_leaves_nothing(
    shim: XmlMultipartShim, gcs_emulator: GcsEmulator, gcs_bucket: str,
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:  # fmt: skip
    rule = Rule("status", "PUT", "partNumber=2", times=None, statuses=(503,))
    proxy = FaultProxy(shim.url, [rule])
    config = two_ranks(gcs_bucket, request_deadline_seconds=3.0)
    with proxy.running():
        ranks = workers.run(config, tmp_path, emulator_url=proxy.url, timeout=150)
    errors = [w.result.error or "" for w in ranks]
    assert any("upload part 2 of gs://" in e and "HTTP 503" in e for e in errors), errors
    assert all(w.proc.returncode != 0 for w in ranks)
    assert shim.uploads_open == 0
    assert [n for n in stored(gcs_emulator, gcs_bucket, monkeypatch) if "/checkpoints/" in n] == []


def test_results_record_the_scheme_auto_became(monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptbench.workload.rank.process.environment import describe

    config = workers.small_config("gs://bkt/x", backend="gcs")
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    facts = describe(config)
    assert (facts["upload_scheme"], facts["settings"]["upload_scheme"]) == ("multipart", "auto")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:1")
    assert describe(config)["upload_scheme"] == "compose"
    assert "upload_scheme" not in describe(workers.small_config("/tmp/x", backend="file"))
