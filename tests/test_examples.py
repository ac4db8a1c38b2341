"""examples/: every benchmark validates against the generated CRD and the spec model, and
`ckptbench render` turns each into a schema-valid JobSet; the claims they mount exist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from ckptbench.operator.spec.names import API_VERSION, KIND, validate_name
from ckptbench.operator.spec.parse import parse_spec
from ckptbench.workload.contract.checkpoint import sizes
from tests.k8s_schemas import pod_template_schema, validate, validate_pod_template

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
CRD = ROOT / "crds" / "checkpointbenchmarks.ckptbench.dev.yaml"
CHART = ROOT / "charts" / "ckptbench"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def benchmarks() -> list[tuple[Path, dict[str, Any]]]:
    return [(p, d) for p in EXAMPLES for d in documents(p) if d.get("kind") == KIND]


def claims() -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d
        for p in EXAMPLES
        for d in documents(p)
        if d.get("kind") == "PersistentVolumeClaim"
    }


def chart_default_image() -> str:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    image = values["workload"]["image"]
    return f"{image['repository']}:{image['tag'] or chart['appVersion']}"


def example_id(item: tuple[Path, dict[str, Any]]) -> str:
    return item[0].name


BENCHMARKS = benchmarks()


def test_examples_hold_only_benchmarks_and_their_claims() -> None:
    assert EXAMPLES, "examples/ is empty"
    for path in EXAMPLES:
        docs = documents(path)
        assert docs, f"{path.name}: no documents"
        for doc in docs:
            assert (doc.get("apiVersion"), doc.get("kind")) in {
                (API_VERSION, KIND),
                ("v1", "PersistentVolumeClaim"),
            }, f"{path.name}: unexpected {doc.get('apiVersion')}/{doc.get('kind')}"


@pytest.fixture(scope="module")
def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == API_VERSION.split("/")[1]]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("item", BENCHMARKS, ids=example_id)
def test_benchmark_validates_against_the_crd_schema_and_the_spec_model(
    item: tuple[Path, dict[str, Any]], crd_schema: dict[str, Any]
) -> None:
    path, doc = item
    jsonschema.validate(doc, crd_schema, cls=jsonschema.Draft7Validator)
    assert validate_name(doc["metadata"]["name"]) is None
    assert "namespace" not in doc["metadata"], f"{path.name}: let kubectl -n choose"
    parse_spec(doc["spec"])  # raises SpecError naming each bad field


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    """`ckptbench render` of every benchmark example, in one process, with the chart's image."""
    files = sorted({str(path) for path, _ in BENCHMARKS})
    args = [sys.executable, "-m", "ckptbench.cli", "render", "--no-owner-reference"]
    args += ["--default-image", chart_default_image()]
    # What the examples' comments ask the admin to allow at install.
    args += ["--allow-secret", "minio-keys"]
    for file in files:
        args += ["-f", file]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_every_benchmark_renders_to_a_schema_valid_jobset(rendered: list[dict[str, Any]]) -> None:
    assert sorted(j["metadata"]["name"] for j in rendered) == sorted(
        d["metadata"]["name"] for _, d in BENCHMARKS
    )
    for jobset in rendered:
        assert jobset["kind"] == "JobSet"
        validate(jobset)
        for replicated in jobset["spec"]["replicatedJobs"]:
            validate_pod_template(replicated["template"]["spec"]["template"])


def test_rendered_pods_mount_the_example_claims(rendered: list[dict[str, Any]]) -> None:
    available = claims()
    for jobset in rendered:
        pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        for volume in pod.get("volumes", []):
            claim = volume.get("persistentVolumeClaim")
            if claim:
                assert claim["claimName"] in available, (
                    f"{jobset['metadata']['name']} mounts claim {claim['claimName']}, "
                    "which no example defines"
                )


@pytest.mark.parametrize("name", sorted(claims()))
def test_claims_are_valid_persistent_volume_claims(name: str) -> None:
    claim = claims()[name]
    # No standalone PVC schema is vendored; the pod schema carries PersistentVolumeClaimSpec
    # (ephemeral.volumeClaimTemplate.spec) and ObjectMeta, the strict upstream definitions.
    volume = pod_template_schema()["properties"]["spec"]["properties"]["volumes"]["items"]
    claim_spec = volume["properties"]["ephemeral"]["properties"]["volumeClaimTemplate"]
    jsonschema.validate(
        claim["spec"], claim_spec["properties"]["spec"], cls=jsonschema.Draft7Validator
    )
    jsonschema.validate(
        claim["metadata"],
        pod_template_schema()["properties"]["metadata"],
        cls=jsonschema.Draft7Validator,
    )
    assert set(claim) == {"apiVersion", "kind", "metadata", "spec"}


def test_reference_configurations_are_all_there() -> None:
    """The reference's table: LAYER_SIZE=100000, PADDING_SIZE=196 on 4, 35 and 548 ranks,
    each with gcs and gcsfs. 196 < 548 cannot be expressed (every rank must own a tensor), so
    that one keeps one tensor per rank (paddingSize = worldSize), as its comment explains."""
    found = {}
    for path, doc in BENCHMARKS:
        if path.name.startswith("reference-") and doc["spec"]["backend"] != "file":
            spec = parse_spec(doc["spec"])
            found[(spec.world_size, spec.backend.value)] = spec
    assert set(found) == {(w, b) for w in (4, 35, 548) for b in ("gcs", "gcsfs")}
    for (world, _), spec in found.items():
        assert spec.layer_size == 100_000
        assert spec.padding_size == (196 if world <= 196 else world)
    assert sizes.format_bytes(found[(4, "gcs")].total_bytes) == "73.02 GiB"


def test_kueue_example_names_the_charts_local_queue() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    queued = [d for _, d in BENCHMARKS if d["spec"].get("queueName")]
    assert queued, "no Kueue-queued example"
    for doc in queued:
        assert doc["spec"]["queueName"] == values["kueue"]["localQueue"]["name"]
        # Kueue admits against quota from the pods' requests.
        assert {"cpu", "memory"} <= set(doc["spec"]["resources"]["requests"])


def test_smoke_example_is_small_and_needs_no_cloud() -> None:
    (doc,) = [d for p, d in BENCHMARKS if p.name == "smoke.yaml"]
    spec = parse_spec(doc["spec"])
    assert spec.backend.value == "file"
    assert spec.world_size >= 2, "the smoke test should exercise the rendezvous"
    assert spec.total_bytes <= 64 * 1024**2
    assert spec.active_deadline_seconds is not None


def test_the_mlperf_v3_example_runs_the_four_models_as_v3_does_and_is_closed() -> None:
    from ckptbench.workload.contract.checkpoint import models
    from ckptbench.workload.contract.results import mlperf_rules

    specs = [parse_spec(d["spec"]) for d in documents(ROOT / "examples" / "mlperf-v3.yaml")]
    assert {s.model: s.world_size for s in specs} == {
        p: m.processes for p, m in models.MLPERF_V3.items()
    }
    for spec in specs:
        found = mlperf_rules.category(spec.record())
        assert found is not None and found.label == "CLOSED", (spec.model, found)


def test_the_gcsfs_8b_strategies_sweep_compares_the_three_at_8b_weights() -> None:
    sweep = documents(ROOT / "examples" / "sweeps" / "gcsfs-8b-strategies.yaml")[0]
    assert sweep["spec"]["axes"]["strategy"] == ["sharded", "full", "replicated"]
    assert set(sweep["spec"]["axes"]["backend"]) == {"gcs", "gcsfs"}
    template = sweep["spec"]["template"]
    parameters = template["layerSize"] * 1000 * template["paddingSize"]
    assert parameters == pytest.approx(8_030_261_248, rel=0.01)  # Llama 3.1 8B's


def test_the_restore_example_runs_gcsfs_two_topology_changes_on_8_pods() -> None:
    path = ROOT / "examples" / "llama3-8b-restore-gcs.yaml"
    specs = [parse_spec(d["spec"]) for d in documents(path)]
    assert [(s.world_size, s.load_world_size) for s in specs] == [(8, 4), (4, 8)]
    assert [s.rank_count for s in specs] == [8, 8]
