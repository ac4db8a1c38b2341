"""A CheckpointBenchmark restoring onto more ranks than saved (worldSize 4, loadWorldSize 8, as
gcsfs's 4 -> 8): admitted by the CRD's CEL rules and by their Python twins, rendered into a JobSet
of 8 pods that validates against the JobSet and pod schemas, each pod's environment a valid rank
of the run (the first 4 saving)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import jsonschema

from ckptbench.operator.render.jobset import render_jobset
from ckptbench.operator.spec import names as spec_names
from ckptbench.operator.spec.parse import parse_spec
from ckptbench.operator.status import compute as st
from ckptbench.workload.contract.config import WorkloadConfig
from tests.crd_validation import cel_failures, closed, schema_errors
from tests.k8s_schemas import schema_for, validate, validate_pod_template
from tests.test_render import DEFAULTS, NAMESPACE, UID, _pod_env

SPEC: dict[str, Any] = {
    "worldSize": 4,
    "loadWorldSize": 8,
    "model": "llama3-debug",
    "checkpointPath": "gs://bench-bucket/ckpt",
}
NAME = "grow"


def _benchmark(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": spec_names.API_VERSION,
        "kind": spec_names.KIND,
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": spec,
    }


def test_the_api_server_and_the_operator_admit_a_restore_onto_more_ranks() -> None:
    obj = _benchmark(SPEC)
    assert schema_errors(obj) == []
    assert cel_failures(obj) == []  # the CEL rule
    parsed = parse_spec(SPEC)  # its Python twin
    assert parsed.world_size == 4 and parsed.load_world_size == 8 and parsed.rank_count == 8


def test_a_restore_onto_more_ranks_renders_one_pod_per_loading_rank() -> None:
    spec = parse_spec(SPEC)
    jobset = render_jobset(NAME, NAMESPACE, UID, spec, DEFAULTS)
    validate(jobset)
    jsonschema.Draft7Validator(closed(schema_for("jobset.x-k8s.io/v1alpha2", "JobSet"))).validate(
        jobset
    )
    (replicated,) = jobset["spec"]["replicatedJobs"]
    job = replicated["template"]["spec"]
    assert replicated["replicas"] == 1
    assert job["parallelism"] == 8 and job["completions"] == 8
    pod = job["template"]
    validate_pod_template(pod)
    (container,) = pod["spec"]["containers"]
    configs = [WorkloadConfig.from_env(_pod_env(container, i, "node-a")) for i in range(8)]
    assert [c.rank for c in configs] == list(range(8))
    assert [c.saves for c in configs] == [True] * 4 + [False] * 4
    assert {(c.world_size, c.load_world_size, c.rank_count) for c in configs} == {(4, 8, 8)}


def test_the_status_expects_every_loading_rank() -> None:
    status = st.compute_status(parse_spec(SPEC), None, [], None, datetime.now(UTC))
    assert status.ranks_expected == 8 and status.ranks_summary == "0/8"
