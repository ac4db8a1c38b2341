"""The storage libraries' known log noise: hidden and counted, unless verbose; nothing else is."""

from __future__ import annotations

import logging

import pytest

from ckptbench.workload.contract import config
from ckptbench.workload.contract.names import VERBOSE_LOGS_ENV
from ckptbench.workload.storage import noise

MOVE = (
    "Failed to move file using moveTo API: Metadata in the request couldn't decode, 400. "
    "Falling back to copy/delete."
)
REFUSED = "_request non-retriable exception: Metadata in the request couldn't decode, 400"
RETRY = "Retrying (Retry(total=2, connect=None, read=None, redirect=None, status=None)) after ..."


def _emit(caplog: pytest.LogCaptureFixture) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        gcsfs, pool = logging.getLogger("gcsfs"), logging.getLogger("urllib3.connectionpool")
        gcsfs.warning(MOVE)
        try:
            raise RuntimeError("400")
        except RuntimeError:
            gcsfs.exception(REFUSED)
        pool.warning(RETRY)
        gcsfs.error("_request non-retriable exception: Forbidden, 403")  # not known: kept
        pool.warning("Connection pool is full, discarding connection")  # not known: kept
    return [r.getMessage() for r in caplog.records]


def test_known_noise_is_hidden_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    quieter = noise.quiet_unless_verbose({})
    assert quieter is not None
    try:
        shown = _emit(caplog)
    finally:
        quieter.remove()
    assert shown == [
        "_request non-retriable exception: Forbidden, 403",
        "Connection pool is full, discarding connection",
    ]
    assert quieter.summary() == (
        "3 known library log message(s) hidden (gcsfs moveTo fallback x1, gcsfs moveTo refusal "
        "(emulator) x1, urllib3 retry x1); 'ckptbench run --verbose' shows them"
    )
    # Removed: everything shows again.
    assert len(_emit(caplog)) == 5


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_verbose_shows_everything(caplog: pytest.LogCaptureFixture, value: str) -> None:
    assert noise.quiet_unless_verbose({VERBOSE_LOGS_ENV: value}) is None
    assert len(_emit(caplog)) == 5


def test_nothing_hidden_says_nothing() -> None:
    assert noise.Quieter().summary() is None


def test_the_variable_is_no_unknown_setting() -> None:
    assert config.unknown_variables({VERBOSE_LOGS_ENV: "1", "CKPTBENCH_VERBOSE": "1"}) == [
        "CKPTBENCH_VERBOSE"
    ]
