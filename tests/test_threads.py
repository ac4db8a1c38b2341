"""Intra-op threads from the CPU limit: the rendered OMP_NUM_THREADS, the quantity it comes from,
and the cgroup quota a rank reads when nothing set it (files in a tmp dir, no real cgroup)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from ckptbench.operator.render.jobset import RenderDefaults, intra_op_threads, render_jobset
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.workload.contract.quantity import cpu_threads
from ckptbench.workload.local.emulator import free_port
from ckptbench.workload.rank import worker
from ckptbench.workload.rank.process import cpus
from ckptbench.workload.storage import objects as objectio
from tests.k8s_schemas import validate
from tests.workers import one_rank

UID = "5f0c2a9e-1b7d-4c1e-9a51-0d4c7b3e2f10"
DEFAULTS = RenderDefaults(image="registry.example/ckptbench-workload:1.0")


@pytest.mark.parametrize(
    ("limit", "threads"),
    [
        ("500m", 1),
        ("1", 1),
        ("1.5", 2),
        ("2", 2),
        ("2000m", 2),  # exact: not ceil(2.0000000001)
        ("2001m", 3),
        (3, 3),
        (0.25, 1),
        ("0", 1),
        ("100u", 1),
        ("1k", 1000),
    ],
)
def test_cpu_threads_round_the_limit_up_to_at_least_one(limit: str | float, threads: int) -> None:
    assert cpu_threads(limit) == threads


@pytest.mark.parametrize(("limit", "says"), [("lots", "not a quantity"), ("-1", "negative")])
def test_a_bad_cpu_limit_is_named(limit: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        cpu_threads(limit)


def _container(resources: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "worldSize": 2,
        "layerSize": 100,
        "paddingSize": 4,
        "checkpointPath": "gs://bucket/x",
    }
    if resources is not None:
        spec["resources"] = resources
    jobset = render_jobset(
        "demo", "ns", UID, CheckpointBenchmarkSpec.model_validate(spec), DEFAULTS
    )
    validate(jobset)
    (replicated,) = jobset["spec"]["replicatedJobs"]
    (container,) = replicated["template"]["spec"]["template"]["spec"]["containers"]
    return dict(container)


@pytest.mark.parametrize(
    ("resources", "omp"),
    [
        (None, None),
        ({"limits": {"memory": "1Gi"}}, None),
        ({"requests": {"cpu": "2"}}, None),  # a request is not a limit: the rank may burst
        ({"limits": {"cpu": "500m"}}, "1"),
        ({"limits": {"cpu": "1.5"}}, "2"),
        ({"limits": {"cpu": 4}}, "4"),
        ({"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "4Gi"}}, "2"),
    ],
    ids=["none", "memory-only", "cpu-request", "500m", "1.5", "int-4", "request-and-limit"],
)
def test_rank_containers_get_omp_num_threads_from_the_cpu_limit(
    resources: dict[str, Any] | None, omp: str | None
) -> None:
    env = _container(resources)["env"]
    found = [var for var in env if var["name"] == "OMP_NUM_THREADS"]
    assert found == ([] if omp is None else [{"name": "OMP_NUM_THREADS", "value": omp}])
    assert intra_op_threads(resources) == (None if omp is None else int(omp))


@pytest.mark.parametrize("where", ["limits", "requests"])
def test_a_spec_with_a_cpu_quantity_that_is_not_one_is_refused_naming_it(where: str) -> None:
    with pytest.raises(ValidationError, match=rf"{where}\.cpu: not a quantity: 'two'"):
        CheckpointBenchmarkSpec.model_validate(
            {"checkpointPath": "gs://bucket/x", "resources": {where: {"cpu": "two"}}}
        )


# -- the rank's side: the cgroup quota ------------------------------------------------------------


def _cgroup(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return tmp_path


@pytest.mark.parametrize(
    ("files", "limit"),
    [
        ({}, None),
        ({"cpu.max": "max 100000"}, None),
        ({"cpu.max": "200000 100000"}, 2.0),
        ({"cpu.max": "150000 100000"}, 1.5),
        ({"cpu.max": "50000 100000"}, 0.5),
        ({"cpu.max": "25000 50000"}, 0.5),
        ({"cpu.max": "garbage"}, None),
        ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),
        ({"cpu/cpu.cfs_quota_us": "300000", "cpu/cpu.cfs_period_us": "100000"}, 3.0),
        (
            {"cpu,cpuacct/cpu.cfs_quota_us": "250000", "cpu,cpuacct/cpu.cfs_period_us": "100000"},
            2.5,
        ),
        ({"cpu/cpu.cfs_quota_us": "300000"}, None),  # no period: nothing to divide by
    ],
    ids=[
        "no-cgroup",
        "v2-max",
        "v2-2",
        "v2-1.5",
        "v2-0.5",
        "v2-short-period",
        "v2-garbage",
        "v1-none",
        "v1-3",
        "v1-joined-2.5",
        "v1-no-period",
    ],
)
def test_cgroup_cpu_limit(tmp_path: Path, files: dict[str, str], limit: float | None) -> None:
    assert cpus.cgroup_cpu_limit(_cgroup(tmp_path, files)) == limit


@pytest.mark.parametrize(
    ("limit", "available", "threads"),
    [(None, 8, None), (0.5, 8, 1), (1.5, 8, 2), (2.0, 8, 2), (16.0, 4, 4)],
)
def test_threads_for_a_quota(limit: float | None, available: int, threads: int | None) -> None:
    assert cpus.threads_for(limit, available) == threads


@pytest.fixture
def torch_threads() -> Iterator[int]:
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_a_rank_sizes_torch_from_the_quota(tmp_path: Path, torch_threads: int) -> None:
    root = _cgroup(tmp_path, {"cpu.max": "150000 100000"})
    torch.set_num_threads(5)
    assert cpus.limit_torch_threads({}, root, cpus=8) == 2
    assert torch.get_num_threads() == 2


def test_omp_num_threads_set_by_the_user_wins_over_the_quota(
    tmp_path: Path, torch_threads: int
) -> None:
    root = _cgroup(tmp_path, {"cpu.max": "150000 100000"})
    torch.set_num_threads(3)
    assert cpus.limit_torch_threads({"OMP_NUM_THREADS": "3"}, root, cpus=8) == 3
    assert torch.get_num_threads() == 3
    # And without a quota nothing changes either.
    assert cpus.limit_torch_threads({}, _cgroup(tmp_path / "none", {}), cpus=8) == 3


def test_a_rank_started_without_omp_num_threads_uses_its_quota_and_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, torch_threads: int
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpus, "CGROUP_ROOT", _cgroup(tmp_path / "cgroup", {"cpu.max": "1 1"}))
    torch.set_num_threads(2)
    config = one_rank(
        tmp_path,
        layer_size=100,
        padding_size=2,
        sample_count=1,
        master_port=free_port(),
        rendezvous_timeout_seconds=20,
        termination_log="",
    )
    assert worker.run(config) == 0
    assert torch.get_num_threads() == 1
    full = json.loads(objectio.read_text(f"{config.results_path}/rank-00000.json"))
    assert full["environment"]["torch_threads"] == 1
