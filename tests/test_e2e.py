"""End to end on a real cluster: the smoke example through the installed chart, JobSet and the
workload image, to status Succeeded with results and the operator's metrics.

Opt-in: `pytest --e2e tests/test_e2e.py` after `e2e/setup-kind.sh`. It talks only to the kube
context that script makes (kind-ckptbench-e2e), named on every call, and refuses to run when
that context is missing or its namespace lacks the script's mark, so it never touches a cluster
it did not create.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
CONTEXT = "kind-ckptbench-e2e"
NAMESPACE = "ckptbench-e2e"
MARK = "ckptbench.dev/e2e"
RELEASE, RELEASE_NAMESPACE = "ckptbench", "ckptbench-system"
DEADLINE_SECONDS = float(os.environ.get("CKPTBENCH_E2E_TIMEOUT", "900"))


class Kube:
    def __init__(self, kubectl: str) -> None:
        self.kubectl = kubectl

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [self.kubectl, "--context", CONTEXT, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json"))


@pytest.fixture(scope="module")
def kube() -> Kube:
    kubectl = str(ROOT / ".tools" / "bin" / "kubectl")
    if not Path(kubectl).exists():
        kubectl = shutil.which("kubectl") or ""
    if not kubectl:
        pytest.fail("kubectl not found: run scripts/install-helm.sh")
    contexts = subprocess.run(
        [kubectl, "config", "get-contexts", "-o", "name"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    ).stdout.split()
    if CONTEXT not in contexts:
        pytest.fail(f"no kube context {CONTEXT}: make the cluster with e2e/setup-kind.sh")
    kube = Kube(kubectl)
    namespace = kube.json("get", "namespace", NAMESPACE)
    if namespace["metadata"].get("labels", {}).get(MARK) != "true":
        pytest.fail(
            f"namespace {NAMESPACE} in {CONTEXT} lacks the label {MARK}=true that "
            "e2e/setup-kind.sh sets: refusing a cluster this project did not make"
        )
    return kube


def load_example(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / "examples" / name).read_text()) if d]


@pytest.fixture
def smoke(kube: Kube) -> Iterator[str]:
    """The smoke example under a fresh name (its claim is shared), deleted afterwards."""
    (claim,) = load_example("smoke-pvc.yaml")
    (benchmark,) = load_example("smoke.yaml")
    name = f"smoke-{uuid.uuid4().hex[:6]}"
    benchmark["metadata"]["name"] = name
    kube.run("-n", NAMESPACE, "apply", "-f", "-", stdin=yaml.safe_dump(claim))
    kube.run("-n", NAMESPACE, "apply", "-f", "-", stdin=yaml.safe_dump(benchmark))
    try:
        yield name
    finally:
        kube.run("-n", NAMESPACE, "delete", "checkpointbenchmark", name, "--wait=false")


def wait_for_terminal_phase(kube: Kube, name: str) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_SECONDS
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = kube.json("-n", NAMESPACE, "get", "checkpointbenchmark", name).get("status", {})
        if status.get("phase") in ("Succeeded", "Failed"):
            return status
        time.sleep(5)
    raise AssertionError(f"{name} not finished after {DEADLINE_SECONDS:.0f}s; status: {status}")


def test_smoke_benchmark_succeeds_with_results(kube: Kube, smoke: str) -> None:
    status = wait_for_terminal_phase(kube, smoke)
    assert status["phase"] == "Succeeded", json.dumps(status, indent=2)
    assert status["ranksReported"] == status["ranksExpected"] == 2
    assert status["checkpointBytes"] == 4 * 1000 * 4000
    assert status.get("verified") is True
    for operation in ("save", "load"):
        summary = status[operation]
        assert summary["samples"] == 2
        assert 0 < summary["meanSeconds"] <= summary["maxSeconds"]
        assert summary["throughputBytesPerSecond"] > 0

    # The JobSet is the operator's, owned by the benchmark.
    jobset = kube.json("-n", NAMESPACE, "get", "jobsets.jobset.x-k8s.io", smoke)
    (owner,) = jobset["metadata"]["ownerReferences"]
    assert owner["kind"] == "CheckpointBenchmark" and owner["name"] == smoke

    # The operator's metrics, read through the API server's service proxy (no port-forward).
    metrics = kube.run(
        "get",
        "--raw",
        f"/api/v1/namespaces/{RELEASE_NAMESPACE}/services/{RELEASE}-metrics:metrics/proxy/metrics",
    )
    series = f'ckptbench_benchmark_phase{{backend="file",name="{smoke}",namespace="{NAMESPACE}",'
    assert f'{series}phase="Succeeded"}} 1.0' in metrics
