"""The real operator against kmock runs a DataLoadingBenchmarkSweep: its children are
DataLoadingBenchmarks, made one at a time; their typed statuses become the sweep's rows; the best
cell is the one with the most samples/s among those that keep the AU floor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ckptbench.operator.data import names as data_names
from ckptbench.operator.sweep import cells as sc
from ckptbench.operator.sweep.kinds import DATA_SWEEP
from ckptbench.workload.contract.data import figures
from harness.kmock_cluster import Client
from harness.operator_process import Operator, wait_for
from tests.test_data_kmock import API, JOBSET, NS, WORLD, data_pod, result

# Cell 1 reads fastest but starves its accelerators (AU 0.5 under the preset's 0.9 floor);
# cell 2 is slower and keeps the floor: the best is cell 2.
EPOCHS = {1: [0.5, 0.6, 0.55], 2: [1.0, 1.2, 1.1]}
AU = {1: 0.5, 2: 0.95}


def _results(cell: int) -> list[Any]:
    return [
        result(rank, epoch_seconds=EPOCHS[cell], au=[AU[cell]], first_batch_seconds=0.1 * cell)
        for rank in range(WORLD)
    ]


def _getter(client: Client, api: str, plural: str, name: str) -> Callable[[], Any]:
    return lambda: client.get(api, plural, NS, name)


def _sweep_status(client: Client, name: str) -> dict[str, Any]:
    found: dict[str, Any] = (client.get(API, DATA_SWEEP.plural, NS, name) or {}).get("status") or {}
    return found


def test_a_data_sweep_runs_its_cells_and_names_the_best_that_keeps_the_floor(
    client: Client, operator: Operator
) -> None:
    body = {
        "apiVersion": API,
        "kind": DATA_SWEEP.kind,
        "metadata": {"name": "reads", "namespace": NS},
        "spec": {
            "template": {"dataPath": "gs://bucket/data", "worldSize": WORLD},
            "axes": {"numWorkers": [1, 2]},
        },
    }
    created = client.create(API, DATA_SWEEP.plural, body)
    uid = created["metadata"]["uid"]
    for number in (1, 2):
        name = sc.child_name("reads", number)
        child = wait_for(f"child {name}", _getter(client, API, data_names.PLURAL, name))
        assert child["kind"] == data_names.KIND
        (owner,) = child["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"]) == (DATA_SWEEP.kind, uid)
        assert child["spec"]["numWorkers"] == number
        # One at a time: the second child waits for the first.
        assert client.get(API, data_names.PLURAL, NS, sc.child_name("reads", number + 1)) is None
        wait_for("the child's JobSet", _getter(client, JOBSET, "jobsets", name))
        for r in _results(number):
            client.create("v1", "pods", data_pod(name, r.rank, "Succeeded", r.to_message(), 0))

    def done() -> dict[str, Any] | None:
        status = _sweep_status(client, "reads")
        return status if status.get("phase") == "Succeeded" else None

    status = wait_for("the sweep Succeeded", done)
    assert status["progress"] == "2/2"
    rows = status["cells"]
    assert [r["settings"] for r in rows] == [{"numWorkers": 1}, {"numWorkers": 2}]
    for row in rows:
        summary = figures.summarize(_results(row["cell"]), WORLD, 0.9)
        assert row["phase"] == "Succeeded"
        assert row["samplesPerSecond"] == pytest.approx(summary.samples_per_second)
        assert row["acceleratorUtilization"] == pytest.approx(summary.accelerator_utilization)
        assert row["auFloor"] == 0.9
        assert row["firstBatchSeconds"] == pytest.approx(0.1 * row["cell"])
    assert [r["auPassed"] for r in rows] == [False, True]
    assert rows[0]["samplesPerSecond"] > rows[1]["samplesPerSecond"]
    assert status["best"]["name"] == "reads-c2"
    assert status["bestCell"] == "reads-c2 (numWorkers=2)"
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Complete"] == "True"
