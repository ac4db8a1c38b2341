"""A rank's termination message is untrusted: a forged number makes that rank unreadable.

The pods run an image a benchmark's author may choose, so what they report is checked (finite,
within the declared bounds) before any figure is computed from it. A forged result must neither
raise inside compute_status (the benchmark would stay Pending with ReconcileError for good) nor
put a NaN in the status (not JSON: the API server refuses the patch).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from ckptbench.operator.spec.status_schema import status_body
from ckptbench.operator.status import compute as st
from tests.test_status import NOW, TOTAL, jobset, pod, result, spec


def _forged(rank: int, change: dict[str, Any], where: tuple[str, ...] = ()) -> str:
    doc = json.loads(result(rank).to_termination_message())
    target = doc
    for key in where:
        target = target[key]
    target.update(change)
    # json.dumps writes NaN and Infinity as the bare words Python's json reads back.
    return json.dumps(doc)


FORGERIES = {
    "bytes 10**400": (_forged(1, {"bytes": 10**400}), "bytes"),
    "negative bytes": (_forged(1, {"bytes": -1}), "bytes"),
    "NaN mean seconds": (_forged(1, {"mean": math.nan}, ("save", "stats")), "mean"),
    "infinite I/O seconds": (_forged(1, {"max": math.inf}, ("load", "io")), "max"),
    "NaN in a sample list": (_forged(1, {"seconds": [math.nan, 1.0]}, ("save",)), "seconds"),
    "a century-long sample": (_forged(1, {"seconds": [4e9, 1.0]}, ("save",)), "seconds"),
    "a huge read-path count": (_forged(1, {"read_paths": {"direct": 10**30}}), "read_paths"),
}


@pytest.mark.parametrize("forged", list(FORGERIES), ids=list(FORGERIES))
def test_a_forged_number_makes_the_rank_unreadable_and_the_status_still_computes(
    forged: str,
) -> None:
    message, field = FORGERIES[forged]
    pods = [pod(r, message=result(r).to_termination_message()) for r in (0, 2, 3)]
    pods.append(pod(1, message=message))
    status = status_body(st.compute_status(spec(4), jobset(), pods, None, NOW))
    text = json.dumps(status, allow_nan=False)  # what the API server would take
    assert status["unreadableResultCount"] == 1, text
    (entry,) = status["unreadableResults"]
    assert entry["rank"] == 1 and field in entry["problem"], entry
    assert status["ranksReported"] == 3
    assert status["phase"] != "Succeeded"  # not while a rank has no readable result


def test_an_honest_result_at_the_edges_is_read() -> None:
    pods = [pod(r, message=result(r, save=1e-6, load=86_400.0).to_termination_message())
            for r in range(4)]  # fmt: skip
    status = status_body(st.compute_status(spec(4), jobset(), pods, None, NOW))
    assert status.get("unreadableResultCount") is None and status["phase"] == "Succeeded"


def _without_save(rank: int) -> str:
    doc = json.loads(result(rank).to_termination_message())
    del doc["save"]
    return json.dumps(doc)


MISMATCHES = {
    # "4/4 ranks reported success" with the save figures of 3 ranks and ranksLeftOut 0.
    "no save section": (_without_save(1), "has no save section"),
    # 100 bytes instead of the spec's shard: the throughput would divide the wrong bytes.
    "100 bytes": (result(1, shard=100).to_termination_message(), "reports 100 bytes"),
    "twice the shard": (
        result(1, shard=2 * TOTAL // 4).to_termination_message(),
        f"the spec gives rank 1 {TOTAL // 4}",
    ),
}


@pytest.mark.parametrize("case", list(MISMATCHES))
def test_a_result_that_does_not_match_the_spec_makes_the_rank_unreadable(case: str) -> None:
    message, says = MISMATCHES[case]
    pods = [pod(r, message=result(r).to_termination_message()) for r in (0, 2, 3)]
    pods.append(pod(1, message=message))
    status = status_body(st.compute_status(spec(4), jobset(), pods, None, NOW))
    assert status["unreadableResultCount"] == 1, status
    (entry,) = status["unreadableResults"]
    assert entry["rank"] == 1 and says in entry["problem"], entry
    assert status["ranksReported"] == 3
    assert status["phase"] != "Succeeded"
    assert "4/4" not in json.dumps(status)
