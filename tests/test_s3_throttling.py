"""Backend s3 and the 429s its CRT client does not retry, on moto behind the fault proxy.

The client retries a 503 and a 429 whose S3 code is ``SlowDown``; a 429 with any other code or
none fails the transfer at once (``AWS_ERROR_S3_INVALID_RESPONSE_STATUS``). The backend writes or
reads that file (or the one object of strategy ``full``) again, within ``request_deadline_seconds``,
and says so on the rank's stderr; when the throttling outlasts the deadline the rank fails naming
the file, the attempts and the cause, and nothing is left. A file failing in one of DCP's writer
threads fails the save (torch alone would lose it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.local.s3_server import S3Server
from ckptbench.workload.storage.s3 import objects
from ckptbench.workload.storage.s3.s3torch_seam import S3Exception
from ckptbench.workload.storage.s3.throttling import throttled
from ckptbench.workload.storage.session import open_session
from tests import workers
from tests.fault_proxy import FaultProxy, Rule
from tests.test_dcp_files import Broken, FaultyFiles, in_worker_thread
from tests.test_s3_faults import two_ranks

pytestmark = [pytest.mark.timeout(240)]

RETRIED = "which the client does not retry); retrying in"
TOO_MANY = "TooManyRequests"


def bare_429(method: str, url: str, code: str = "") -> Rule:
    return Rule("status", method, url, statuses=(429,), s3_code=code)


CASES = [
    pytest.param(bare_429("PUT", ".distcp"), {}, "write of", id="data-part-bare-429"),
    pytest.param(bare_429("PUT", ".distcp", TOO_MANY), {}, "write of", id="data-part-coded-429"),
    pytest.param(bare_429("POST", ".distcp?uploads"), {}, "write of", id="upload-start"),
    pytest.param(bare_429("POST", ".distcp?uploadId"), {}, "write of", id="upload-complete"),
    pytest.param(
        bare_429("PUT", ".metadata.tmp"), {}, "finish (the .metadata) of", id="metadata-put"
    ),
    pytest.param(bare_429("GET", ".distcp"), {}, "read of", id="data-get"),
    pytest.param(bare_429("GET", "/.metadata"), {}, "read of", id="metadata-get"),
    pytest.param(bare_429("PUT", "full.pt"), {"strategy": "full"}, "save of", id="full-put"),
    pytest.param(bare_429("GET", "full.pt"), {"strategy": "full"}, "load of", id="full-get"),
]


@pytest.mark.parametrize(("rule", "overrides", "what"), CASES)
def test_a_429_the_client_gives_up_on_is_retried_and_leaves_nothing(
    rule: Rule,
    overrides: dict[str, object],
    what: str,
    s3_server: S3Server,
    s3_bucket: str,
    tmp_path: Path,
) -> None:
    proxy = FaultProxy(s3_server.url, [rule], seed=7)
    config = two_ranks(s3_bucket, "s3", **overrides)
    with proxy.running():
        env = {**s3_server.env(), "AWS_ENDPOINT_URL": proxy.url}
        ranks = workers.run(config, tmp_path, extra_env=env, timeout=200)
    assert rule.fired == 1, (proxy.fired, workers.logs(ranks))
    for w in ranks:
        assert w.proc.returncode == 0, workers.logs(ranks)
        assert w.result.error is None and w.result.verified is True, workers.logs(ranks)
    lines = [line for w in ranks for line in w.stderr.splitlines() if RETRIED in line]
    assert len(lines) == 1, workers.logs(ranks)
    assert lines[0].startswith("[rank ") and f"] {what} s3://" in lines[0], lines
    assert "(HTTP 429" in lines[0], lines
    assert objects.list_names(f"s3://{s3_bucket}/faults/run/checkpoints") == []
    assert objects.unfinished_uploads(f"s3://{s3_bucket}/faults") == []


def test_throttling_past_the_deadline_fails_the_rank_by_name_and_leaves_nothing(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    rule = Rule("status", "PUT", "__1_0.distcp", times=None, statuses=(429,))
    proxy = FaultProxy(s3_server.url, [rule], seed=7)
    config = two_ranks(s3_bucket, "s3", request_deadline_seconds=2)
    with proxy.running():
        env = {**s3_server.env(), "AWS_ENDPOINT_URL": proxy.url}
        ranks = workers.run(config, tmp_path, extra_env=env, timeout=200)
    assert rule.fired >= 2, workers.logs(ranks)
    assert [w.proc.returncode for w in ranks] == [1, 1], workers.logs(ranks)
    error = ranks[1].result.error or ""
    assert "save failed on rank 1" in error, workers.logs(ranks)
    assert "__1_0.distcp: gave up after" in error and "(deadline reached)" in error, error
    assert "last cause: HTTP 429" in error, error
    assert objects.list_names(f"s3://{s3_bucket}/faults/run/checkpoints") == []
    assert objects.unfinished_uploads(f"s3://{s3_bucket}/faults") == []


def test_a_file_failing_in_a_writer_thread_fails_the_s3_save(
    s3_server: S3Server, s3_bucket: str
) -> None:
    config = workers.small_config(
        f"s3://{s3_bucket}/ckpt", backend="s3", world_size=1, s3_threads=2, padding_size=4
    )
    session = open_session(config)
    try:
        writer = session.writer(f"s3://{s3_bucket}/ckpt/a")
        writer.fs = FaultyFiles(writer.fs, in_worker_thread(Broken("denied")))  # type: ignore[attr-defined]
        state = {f"t{i}": torch.full((64, 100), float(i)) for i in range(4)}
        with pytest.raises(CheckpointException, match="denied"):
            dcp_save(state, storage_writer=writer)
    finally:
        session.close()


BODY_429 = "MetaRequestResult { response_status: 429, crt_error: Error(14343, ...)"


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (S3Exception(BODY_429 + ', error_response_body: Some("{\\"error\\": 429}") }'), "HTTP 429"),
        # A body cut short names no code; the status still says 429.
        (S3Exception(BODY_429 + ', error_response_body: Some("<Error><Code>TooMany'), "HTTP 429"),
        (
            S3Exception(BODY_429 + ' Some("<Error><Code>TooManyRequests</Code></Error>") }'),
            "HTTP 429 TooManyRequests",
        ),
        (S3Exception("MetaRequestResult { response_status: 403, crt_error: ... }"), None),
        (S3Exception("MetaRequestResult { response_status: 503, crt_error: ... }"), None),
        (RuntimeError("response_status: 429"), None),  # not the client's
    ],
)
def test_what_counts_as_throttling_the_client_gave_up_on(
    error: BaseException, cause: str | None
) -> None:
    assert throttled(error) == cause
