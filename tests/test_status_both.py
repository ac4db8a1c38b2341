"""The CheckpointBenchmark status surfaces both demands' slowdowns from the ranks' termination
messages (operator/status/compute.py, contract/results/both.py)."""

from __future__ import annotations

from typing import Any

from ckptbench.workload.rank.both import windows
from tests.test_both_windows import _Modelled
from tests.test_status import NOW, compute, jobset, pod, result, spec


def _done(rank: int, side: _Modelled) -> dict[str, Any]:
    timing = windows.timing(windows.run(3, 4, side), 4, 3, side.compute_seconds)
    reported = result(rank).model_copy(update={"both": timing})
    return pod(rank, "Succeeded", reported.to_termination_message())


def test_the_status_carries_each_sides_slowdown_and_its_rank() -> None:
    pods = [_done(r, _Modelled(save_with_loader=1.0 + r)) for r in range(4)]
    status = compute(spec(), jobset(), pods, None, NOW)
    both = status["both"]
    assert both["saveSlowdown"]["ratio"] == 4.0 and both["saveSlowdown"]["rank"] == 3
    assert both["stallSlowdown"]["ratio"] == 2.0
    assert both["loaderSlowdown"]["ratio"] > 1.0
    assert {"samplesPerSecondAlone", "auTogether", "saveSecondsAlone"} <= set(both)


def test_no_loader_no_both_in_the_status() -> None:
    pods = [pod(r, "Succeeded", result(r).to_termination_message()) for r in range(4)]
    assert "both" not in compute(spec(), jobset(), pods, None, NOW)
