"""The S3 clients' own retries, counted by cause: read from the CRT's log (s3) and from the debug
records of botocore and s3fs (s3fs), and reported once per operation with bounded volume. The
fault tests (test_s3_faults.py) check the rank's log end to end; these check each piece."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ckptbench.workload.storage import retry_causes
from ckptbench.workload.storage.retry_causes import RetryCauses
from ckptbench.workload.storage.s3 import crt_log, s3fs_log

# Lines as s3torchconnector 1.5.0 writes them (a 503 SlowDown, a reset mid-upload, mid-download).
THROTTLED = (
    "2026-11-25T19:53:09.646275Z ERROR awscrt::S3MetaRequest: id=0x55ae6cd39f70 Request failed "
    "from error 14342 (Response code indicates throttling). (request=0x7fc79c000e70, response "
    "status=503). Try to setup a retry.\n"
)
RESET_UP = (
    "2026-11-25T19:53:15.708681Z ERROR awscrt::S3MetaRequest: id=0x55ee28dbf4e0 Request failed "
    "from error 1051 (socket is closed.). (request=0x7f0e44014030, response status=0). Try to "
    "setup a retry.\n"
)
RESET_DOWN = RESET_UP.replace("response status=0", "response status=206")


def test_crt_lines_name_their_cause() -> None:
    assert crt_log.cause_of(THROTTLED) == "HTTP 503: Response code indicates throttling"
    assert crt_log.cause_of(RESET_UP) == "socket is closed"
    assert crt_log.cause_of(RESET_DOWN) == "HTTP 206: socket is closed"
    assert crt_log.cause_of("2026-11-25T19:53:15Z  INFO awscrt::S3Client: anything else") is None


def test_the_crt_log_is_read_from_where_it_was_left_whole_lines_only(tmp_path: Path) -> None:
    log = crt_log.CrtRetryLog(tmp_path, owned=True)
    causes = RetryCauses()
    path = tmp_path / f"{crt_log.FILE_PREFIX}.2026-11-25-19"
    cut = RESET_UP.index("closed")  # the writer thread is half-way through a line
    path.write_text(THROTTLED + RESET_UP[:cut])
    log.collect(causes)
    assert causes.drain() == {"HTTP 503: Response code indicates throttling": 1}
    with path.open("a") as f:
        f.write(RESET_UP[cut:] + THROTTLED)
    (tmp_path / f"{crt_log.FILE_PREFIX}.2026-11-25-20").write_text(THROTTLED)  # the next hour
    log.collect(causes)
    assert causes.drain() == {
        "socket is closed": 1,
        "HTTP 503: Response code indicates throttling": 2,
    }
    log.collect(causes)
    assert causes.drain() == {}
    log.close()
    assert not tmp_path.exists()


def test_start_points_the_library_at_a_private_folder_before_it_is_imported() -> None:
    env: dict[str, str] = {}
    log = crt_log.start(env, imported=False)
    assert log is not None and log.owned
    try:
        assert env == {crt_log.DEBUG_LOGS: crt_log.FILTER, crt_log.LOGS_DIR: str(log.directory)}
        assert log.directory.is_dir()
    finally:
        log.close()
    assert env == {} and not log.directory.exists()  # no later process inherits a gone folder
    # Too late once imported: the library read its settings then.
    env = {}
    assert crt_log.start(env, imported=True) is None and env == {}


def test_a_users_own_crt_log_is_left_alone(tmp_path: Path) -> None:
    theirs = tmp_path / f"{crt_log.FILE_PREFIX}.2026-11-25-19"
    theirs.write_text(THROTTLED)  # before this run
    env = {crt_log.DEBUG_LOGS: "debug", crt_log.LOGS_DIR: str(tmp_path)}
    log = crt_log.start(env, imported=True)
    assert log is not None and not log.owned
    assert env == {crt_log.DEBUG_LOGS: "debug", crt_log.LOGS_DIR: str(tmp_path)}
    with theirs.open("a") as f:
        f.write(RESET_UP)
    causes = RetryCauses()
    log.collect(causes)
    assert causes.drain() == {"socket is closed": 1}
    log.close()
    assert theirs.exists()
    assert crt_log.start({crt_log.DEBUG_LOGS: "debug"}, imported=False) is None  # to stdout


class _Everything(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_s3fs_retries_are_counted_and_debug_records_reach_no_handler() -> None:
    root = _Everything()
    logging.getLogger().addHandler(root)
    s3fs = logging.getLogger("s3fs")
    before = (s3fs.level, s3fs.filters[:])
    causes = RetryCauses()
    uninstall = s3fs_log.install(causes)
    try:
        reset = OSError("Response payload is not completed. ConnectionResetError(104)")
        s3fs.debug("Retryable error: %s", reset)
        s3fs.debug("Retryable error: %s", TimeoutError("read timed out"))
        s3fs.debug(
            "Client error (maybe retryable): %s", RuntimeError("An error occurred (SlowDown)")
        )
        s3fs.debug(
            "Client error (maybe retryable): %s", RuntimeError("An error occurred (NoSuchKey)")
        )
        s3fs.debug("CALL: put_object - ...")
        s3fs.warning("a warning still goes through")
    finally:
        uninstall()
        logging.getLogger().removeHandler(root)
    assert causes.drain() == {
        "OSError (connection reset)": 1,
        "TimeoutError": 1,
        "s3fs: SlowDown": 1,
    }
    assert [r.getMessage() for r in root.records] == ["a warning still goes through"]
    assert (s3fs.level, s3fs.filters) == before


class _Http:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


def _answer(status: int, code: str = "") -> tuple[_Http, dict[str, object]]:
    parsed: dict[str, object] = {"ResponseMetadata": {"HTTPStatusCode": status}}
    if code:
        parsed["Error"] = {"Code": code, "Message": "..."}
    return _Http(status), parsed


def test_botocore_attempts_name_status_and_s3_error_code() -> None:
    cause = s3fs_log.attempt_cause
    assert cause(_answer(503, "SlowDown"), None) == "HTTP 503 SlowDown"
    assert cause(_answer(503, "503"), None) == "HTTP 503"  # a HEAD: no body, no code
    assert cause(_answer(500, "InternalError"), None) == "HTTP 500 InternalError"
    assert cause(_answer(400, "RequestTimeout"), None) == "HTTP 400 RequestTimeout"
    assert cause(None, ConnectionResetError(104, "Connection reset by peer")) == (
        "ConnectionResetError (connection reset)"
    )
    assert cause(_answer(200), None) is None
    assert cause(_answer(404, "NoSuchKey"), None) is None


def test_a_watched_client_counts_its_failed_attempts_and_leaves_the_decision_to_botocore() -> None:
    from types import SimpleNamespace

    from botocore.hooks import HierarchicalEmitter

    events = HierarchicalEmitter()
    client = SimpleNamespace(meta=SimpleNamespace(events=events))
    causes = RetryCauses()
    s3fs_log.watch_client(client, causes)
    for response in (_answer(503, "SlowDown"), _answer(200), _answer(503, "SlowDown")):
        answers = events.emit(
            "needs-retry.s3.PutObject", response=response, attempts=1, caught_exception=None
        )
        assert [answer for _, answer in answers] == [None]  # botocore's handler decides
    assert causes.drain() == {"HTTP 503 SlowDown": 2}


def test_a_report_is_one_warning_with_a_bounded_list_of_causes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert retry_causes.report("[rank 0] save of s3://b/c", "the client", {}) is None
    counts = {f"cause {i}": i + 1 for i in range(retry_causes.SHOWN_CAUSES + 3)}
    with caplog.at_level(logging.WARNING, logger=retry_causes.__name__):
        message = retry_causes.report("[rank 0] save of s3://b/c", "the client", counts)
    assert [r.getMessage() for r in caplog.records] == [message]
    assert message is not None
    total = sum(counts.values())
    assert message.startswith(f"[rank 0] save of s3://b/c: {total} request attempt(s) failed")
    shown = [f"{n}x {cause}" for cause, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    assert message.endswith(", ".join(shown[: retry_causes.SHOWN_CAUSES]) + " and 3 other cause(s)")
