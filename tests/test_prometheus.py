"""A real Prometheus scrapes the operator (against the API emulator) the way a ServiceMonitor
makes it, and every PromQL expression of the Grafana dashboard is evaluated through its HTTP API.

The benchmark lives in another namespace than the operator: with the Prometheus Operator's
default honorLabels false, its `namespace` label would become `exported_namespace` and every
per-benchmark panel would be empty. Needs Debian's `prometheus` (scripts/setup.sh installs it);
under CI=true its absence fails the test instead of skipping it.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ckptbench.operator.data import names as data_names
from ckptbench.operator.render import jobset as rendering
from ckptbench.operator.render import labels as render_labels
from ckptbench.operator.spec import names as spec_names
from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.results.rank import (
    BothTiming,
    OpStats,
    OpTiming,
    RankResources,
    RankResult,
    TrainTiming,
)
from harness.kmock_cluster import Client, free_port, running_emulator
from harness.operator_process import (
    DEFAULT_IMAGE,
    Operator,
    running_operator,
    stop_process,
    wait_for,
)
from tests.test_data_kmock import data_benchmark, data_pod
from tests.test_data_kmock import result as data_result
from tests.test_operator_kmock import ckptbench_object, reference_spec
from tests.tools import find_tool

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "charts" / "ckptbench" / "dashboards" / "ckptbench.json"
OPERATOR_NS, BENCH_NS, BENCH = "ckptbench-system", "team-b", "shown"
DATA_BENCH = "read"  # a DataLoadingBenchmark beside it
CKB = f"{spec_names.GROUP}/{spec_names.VERSION}"
WORLD, LAYER, PADDING = 4, 10, 8
# $cluster as Grafana sends its "All": the test's Prometheus, like a single cluster's, puts no
# cluster label on the series.
VARIABLES = {
    "$cluster": ".*",
    "$namespace": BENCH_NS,
    "$benchmark": BENCH,
    "$backend": "gcs",
    "$data_benchmark": DATA_BENCH,
}
# Panels about one benchmark: each must show data for it. The others (the operator's own
# reconciles, sweeps) must evaluate without error.
PER_BENCHMARK = re.compile(r"ckptbench_(benchmark|data|both)_")


def find_prometheus() -> str:
    return find_tool(
        "prometheus", "prometheus not installed: scripts/setup.sh installs Debian's package"
    )


def scrape_config(target: str, honor_labels: bool) -> dict[str, Any]:
    """What the Prometheus Operator generates from the chart's ServiceMonitor, with the
    Kubernetes discovery replaced by the one target: the same labels, relabelling and
    honorLabels."""
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": f"serviceMonitor/{OPERATOR_NS}/ckptbench/0",
                "honor_labels": honor_labels,
                "honor_timestamps": True,
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "metrics_path": "/metrics",
                "scheme": "http",
                "static_configs": [
                    {
                        "targets": [target],
                        "labels": {
                            "__meta_kubernetes_namespace": OPERATOR_NS,
                            "__meta_kubernetes_service_name": "ckptbench-metrics",
                            "__meta_kubernetes_pod_name": "ckptbench-0",
                        },
                    }
                ],
                "relabel_configs": [
                    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                    {
                        "source_labels": ["__meta_kubernetes_service_name"],
                        "target_label": "service",
                    },
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                    {"target_label": "container", "replacement": "operator"},
                    {"target_label": "endpoint", "replacement": "metrics"},
                    {
                        "source_labels": ["__meta_kubernetes_service_name"],
                        "target_label": "job",
                    },
                ],
            }
        ],
    }


class Prometheus:
    def __init__(self, binary: str, workdir: Path, target: str, honor_labels: bool) -> None:
        self.port = free_port()
        config = workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(scrape_config(target, honor_labels)))
        self.log = workdir / "prometheus.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited: {self.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        stop_process(self.proc)


def dashboard_expressions() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    found = []
    for panel in panels:
        for target in panel.get("targets", []):
            expr = target["expr"]
            # The longest first: $benchmark must not eat into $data_benchmark.
            for variable, value in sorted(VARIABLES.items(), key=lambda v: -len(v[0])):
                expr = expr.replace(variable, value)
            found.append((panel["title"], expr.replace("$__rate_interval", "1m")))
    return found


def both_timing() -> BothTiming:
    """A rank's windows of both demands at once: two cycles, so each slowdown has its interval."""
    return BothTiming(
        every=10,
        cycles=2,
        compute_seconds=0.01,
        step_alone=OpStats.of([0.02, 0.022]),
        step_together=OpStats.of([0.025, 0.027]),
        au_alone=OpStats.of([0.5, 0.45]),
        au_together=OpStats.of([0.4, 0.37]),
        samples_alone=80,
        samples_together=80,
        stall_alone=OpStats.of([0.1, 0.12]),
        stall_together=OpStats.of([0.11, 0.14]),
        save_alone=OpStats.of([1.0, 1.1]),
        save_together=OpStats.of([1.2, 1.4]),
    )


def rank_pod(rank: int) -> dict[str, Any]:
    result = RankResult(
        rank=rank,
        bytes=sizes.shard_bytes(rank, WORLD, LAYER, PADDING),
        # An async save beside a training step, with the process checkpointer: every panel,
        # the async and training ones included, has a series to show.
        save=OpTiming.of(
            [1.0 + rank / 10, 2.0],
            [1.0, 2.0],
            blocked_seconds=[0.1, 0.2],
            background_seconds=[0.9, 1.8],
        ),
        load=OpTiming.of([0.5, 0.5], [0.4, 0.4]),
        train=TrainTiming(
            every=10,
            matrix=512,
            step_threads=1,
            cpus=2,
            step=OpStats.of([0.1, 0.1]),
            in_flight_step=OpStats.of([0.12]),
            in_flight_steps=9,
            wait=OpStats.of([0.5]),
            stall=OpStats.of([0.2]),
            overhead=OpStats.of([0.05]),
        ),
        resources=RankResources(
            cpu_user_seconds=10,
            cpu_system_seconds=2,
            peak_rss_bytes=500_000_000,
            sent_bytes=1,
            received_bytes=1,
        ),
        checkpointer_peak_rss_bytes=400_000_000,
        verified=True,
        both=both_timing(),  # the "Both demands at once" panels' series
    )
    terminated = {"exitCode": 0, "reason": "Completed", "message": result.to_termination_message()}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{BENCH}-rank-0-{rank}-abcde",
            "namespace": BENCH_NS,
            "labels": render_labels.benchmark_labels(BENCH),
            "annotations": {render_labels.COMPLETION_INDEX_ANNOTATION: str(rank)},
        },
        "spec": {"containers": [{"name": rendering.CONTAINER_NAME, "image": DEFAULT_IMAGE}]},
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [
                {"name": rendering.CONTAINER_NAME, "state": {"terminated": terminated}}
            ],
        },
    }


@pytest.fixture(scope="module")
def operator_with_a_benchmark(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    """The operator watching the benchmark's namespace, with one finished benchmark there."""
    tmp = tmp_path_factory.mktemp("prometheus-operator")
    with (
        running_emulator() as emulator,
        running_operator(emulator.url, tmp, BENCH_NS) as operator,
    ):
        client = Client(emulator.url)
        spec = reference_spec(WORLD, LAYER, PADDING, "gs://bucket/bench", image=DEFAULT_IMAGE)
        body = ckptbench_object(spec_names.KIND, BENCH, spec, BENCH_NS)
        client.create(CKB, spec_names.PLURAL, body)
        wait_for(
            "the JobSet",
            lambda: client.get("jobset.x-k8s.io/v1alpha2", "jobsets", BENCH_NS, BENCH),
        )
        for rank in range(WORLD):
            client.create("v1", "pods", rank_pod(rank))
        wait_for(
            "the benchmark's results in the metrics",
            lambda: f'name="{BENCH}",namespace="{BENCH_NS}",operation="load"' in operator.metrics(),
        )
        data = data_benchmark(DATA_BENCH, auFloor=0.95)  # AU ~0.91: below it, the verdict 0
        data["metadata"]["namespace"] = BENCH_NS
        client.create(CKB, data_names.PLURAL, data)
        wait_for(
            "the data benchmark's JobSet",
            lambda: client.get("jobset.x-k8s.io/v1alpha2", "jobsets", BENCH_NS, DATA_BENCH),
        )
        for rank in range(2):
            pod = data_pod(DATA_BENCH, rank, "Succeeded", data_result(rank).to_message(), 0)
            pod["metadata"]["namespace"] = BENCH_NS
            client.create("v1", "pods", pod)
        wait_for(
            "the data benchmark's results in the metrics",
            lambda: (
                f'ckptbench_data_au_passed{{backend="gcs",name="{DATA_BENCH}"' in operator.metrics()
            ),
        )
        yield operator


def chart_honor_labels() -> bool:
    """serviceMonitor.honorLabels as the chart installs it."""
    values = yaml.safe_load((ROOT / "charts" / "ckptbench" / "values.yaml").read_text())
    return bool(values["serviceMonitor"]["honorLabels"])


@pytest.mark.parametrize("setting", ["chart-default", "honorLabels-false"])
def test_every_dashboard_expression_through_a_real_prometheus(
    operator_with_a_benchmark: Operator, tmp_path: Path, setting: str
) -> None:
    binary = find_prometheus()
    honor_labels = chart_honor_labels() if setting == "chart-default" else False
    target = f"127.0.0.1:{operator_with_a_benchmark.metrics_port}"
    prometheus = Prometheus(binary, tmp_path, target, honor_labels)
    try:
        wait_for("prometheus ready", prometheus.ready, deadline=60)
        # Two scrapes at least, so rate() over the counters has something to say.
        wait_for(
            "a few scrapes",
            lambda: (
                (r := prometheus.query("count_over_time(up[1m])")) and float(r[0]["value"][1]) >= 3
            ),
            deadline=60,
        )
        empty = []
        for title, expr in dashboard_expressions():
            result = prometheus.query(expr)  # a bad expression fails here, whatever the labels
            if PER_BENCHMARK.search(expr) and not result:
                empty.append(title)
        if setting == "chart-default":
            assert empty == [], f"panels without data for {BENCH_NS}/{BENCH}: {empty}"
            # Counters start at 0: the errors panel has a series before any error.
            assert prometheus.query("ckptbench_operator_reconcile_errors_total")
            # ... and come without prometheus_client's _created series.
            assert prometheus.query('{__name__=~"ckptbench_.+_created"}') == []
        else:
            # What the issue found: the operator's namespace written over the benchmark's.
            assert empty, "expected the per-benchmark panels to lose the benchmark's namespace"
            exported = prometheus.query(
                f'ckptbench_benchmark_phase{{exported_namespace="{BENCH_NS}"}}'
            )
            assert exported and exported[0]["metric"]["namespace"] == OPERATOR_NS
    finally:
        prometheus.stop()
