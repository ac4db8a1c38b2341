"""The real operator against kmock runs a 2x2 CheckpointBenchmarkSweep: children one at a time,
their results aggregated in the sweep's status, the best cell named, children gone with it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from ckptbench.operator.spec import names as spec_names
from ckptbench.operator.sweep import cells as sc
from ckptbench.operator.sweep import crd as sweep_crd
from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from harness.kmock_cluster import Client
from harness.operator_process import Operator, wait_for
from tests.test_operator_kmock import ckptbench_object, rank_pod, reference_spec

CKB = f"{spec_names.GROUP}/{spec_names.VERSION}"
JOBSET = "jobset.x-k8s.io/v1alpha2"
NS = "default"
LAYER, PADDING, WORLD = 10, 4, 2
TOTAL = sizes.total_bytes(LAYER, PADDING)


def _sweep(name: str, **spec: Any) -> dict[str, Any]:
    template = reference_spec(WORLD, LAYER, PADDING, "gs://bucket/sweep")
    return ckptbench_object(sc.SWEEP_KIND, name, {"template": template, **spec})


def _children(client: Client, sweep: str) -> list[dict[str, Any]]:
    return [
        b
        for b in client.list(CKB, spec_names.PLURAL, NS)
        if ((b.get("metadata") or {}).get("labels") or {}).get(sc.LABEL_SWEEP) == sweep
    ]


def _sweep_status(client: Client, name: str) -> dict[str, Any]:
    obj = client.get(CKB, sweep_crd.PLURAL, NS, name) or {}
    found: dict[str, Any] = obj.get("status") or {}
    return found


def _getter(client: Client, api: str, plural: str, name: str) -> Callable[[], Any]:
    return lambda: client.get(api, plural, NS, name)


def _progress_is(client: Client, sweep: str, progress: str) -> Callable[[], bool]:
    return lambda: _sweep_status(client, sweep).get("progress") == progress


def _finish(client: Client, child: str, save_seconds: float, load_seconds: float) -> None:
    """The child's ranks report: every rank takes the given seconds per sample."""
    for rank in range(WORLD):
        result = RankResult(
            rank=rank,
            bytes=sizes.shard_bytes(rank, WORLD, LAYER, PADDING),
            # Two alike samples: intervals of no width, so the best cells are told apart.
            save=OpTiming.of([save_seconds] * 2, [save_seconds] * 2),
            load=OpTiming.of([load_seconds] * 2, [load_seconds] * 2),
            verified=True,
        )
        pod = rank_pod(child, rank, "Succeeded", result.to_termination_message(), 0)
        client.create("v1", "pods", pod)


# save, load seconds per cell: cell 2 saves fastest, cell 3 loads fastest.
TIMES = {1: (2.0, 2.0), 2: (0.5, 3.0), 3: (4.0, 0.25), 4: (1.0, 1.0)}


def test_a_2x2_sweep_runs_cells_one_at_a_time_and_names_the_best(
    client: Client, operator: Operator
) -> None:
    created = client.create(
        CKB,
        sweep_crd.PLURAL,
        _sweep("grid", axes={"backend": ["gcs", "gcsfs"], "threads": [4, 16]}),
    )
    uid = created["metadata"]["uid"]
    for number in (1, 2, 3, 4):
        name = sc.child_name("grid", number)
        child = wait_for(f"child {name}", _getter(client, CKB, spec_names.PLURAL, name))
        (owner,) = child["metadata"]["ownerReferences"]
        assert owner["uid"] == uid and owner["kind"] == sc.SWEEP_KIND
        wait_for("the sweep's progress", _progress_is(client, "grid", f"{number - 1}/4"))
        # One at a time: the next child waits for this one to finish.
        time.sleep(0.5)
        assert len(_children(client, "grid")) == number
        wait_for("the child's JobSet", _getter(client, JOBSET, "jobsets", name))
        _finish(client, name, *TIMES[number])

    def done() -> dict[str, Any] | None:
        status = _sweep_status(client, "grid")
        return status if status.get("phase") == "Succeeded" else None

    status = wait_for("the sweep Succeeded", done)
    assert status["progress"] == "4/4"
    rows = status["cells"]
    assert [r["settings"] for r in rows] == [
        {"backend": "gcs", "threads": 4},
        {"backend": "gcs", "threads": 16},
        {"backend": "gcsfs", "threads": 4},
        {"backend": "gcsfs", "threads": 16},
    ]
    gib = TOTAL / 1024**3
    for row in rows:
        save, load = TIMES[row["cell"]]
        assert row["phase"] == "Succeeded"
        assert row["saveSeconds"] == pytest.approx(save)
        assert row["saveGiBps"] == pytest.approx(gib / save, rel=1e-3)
        assert row["loadGiBps"] == pytest.approx(gib / load, rel=1e-3)
    assert status["bestSave"]["name"] == "grid-c2"
    assert status["bestLoad"]["name"] == "grid-c3"
    assert status["bestSaveCell"] == "grid-c2 (backend=gcs threads=16)"

    def metrics_compare_cells() -> bool:
        text = operator.metrics()
        return all(
            f'ckptbench_sweep_cell_throughput_bytes_per_second{{cell="{n}",namespace="{NS}",'
            f'operation="save",sweep="grid"}}' in text
            for n in (1, 2, 3, 4)
        )

    wait_for("per-cell metrics with the sweep label", metrics_compare_cells)

    client.delete(CKB, sweep_crd.PLURAL, NS, "grid")
    wait_for("the children to go", lambda: not _children(client, "grid"))
    wait_for("the sweep's series to go", lambda: 'sweep="grid"' not in operator.metrics())


def test_parallelism_starts_several_and_a_failed_cell_does_not_stop_the_sweep(
    client: Client, operator: Operator
) -> None:
    client.create(CKB, sweep_crd.PLURAL, _sweep("par", axes={"threads": [4, 8, 16]}, parallelism=2))
    wait_for("two children", lambda: len(_children(client, "par")) == 2)
    time.sleep(0.5)
    assert len(_children(client, "par")) == 2
    message = RankResult(rank=0, error="RuntimeError: bucket vanished").to_termination_message()
    wait_for("the JobSet", lambda: client.get(JOBSET, "jobsets", NS, "par-c1"))
    client.create("v1", "pods", rank_pod("par-c1", 0, "Failed", message, 1))
    wait_for("the third child after the failure", lambda: len(_children(client, "par")) == 3)
    status = wait_for(
        "a failed cell in the status",
        lambda: (
            _sweep_status(client, "par").get("cellsFailed") == 1 and _sweep_status(client, "par")
        ),
    )
    assert status["cells"][0]["phase"] == "Failed"
    assert status["phase"] == "Running"


def test_invalid_sweep_creates_nothing_and_names_the_cell(
    client: Client, operator: Operator
) -> None:
    client.create(CKB, sweep_crd.PLURAL, _sweep("bad", axes={"worldSize": [2, 8]}))
    status = wait_for(
        "status Failed",
        lambda: (
            _sweep_status(client, "bad").get("phase") == "Failed" and _sweep_status(client, "bad")
        ),
    )
    assert status["reason"] == "InvalidSpec"
    assert "axes (cell 2: worldSize=8)" in status["message"]
    assert not _children(client, "bad")
