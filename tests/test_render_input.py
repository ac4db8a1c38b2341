"""``ckptbench render``'s input is bounded and read strictly (issues 21 and 22).

Found: a 100,000-deep list failed after 91 s with a RecursionError; 800,000 small documents did
not finish in 120 s; a key set twice was last-wins; two documents of one name rendered two
JobSets of one name; an unknown top-level field was accepted though the CRD refuses it; and the
README's ``ckptbench render -f examples/smoke.yaml`` exited 2 for want of ``--default-image``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from ckptbench.operator import manifests
from ckptbench.operator import render_cli as cli
from ckptbench.operator.spec.names import CHART_WORKLOAD_IMAGE

ROOT = Path(__file__).resolve().parent.parent
BENCHMARK = """apiVersion: ckptbench.dev/v1alpha1
kind: CheckpointBenchmark
metadata: {name: NAME}
spec: {worldSize: 1, backend: gcs, checkpointPath: gs://bkt/x}
"""


def _render(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, str]:
    path = tmp_path / "in.yaml"
    path.write_text(text)
    code = cli.main(["-f", str(path), "--default-image", "img:1", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a: " + "[" * 100_000 + "]" * 100_000 + "\n", "line 1: nested deeper than 64 levels"),
        ("a: 1\n---\n" * (manifests.MAX_DOCUMENTS + 1), "more than 1000 documents"),
        ("a: '" + "x" * manifests.MAX_BYTES + "'\n", "a manifest file may hold at most"),
        (
            BENCHMARK.replace("worldSize: 1,", "worldSize: 999999, worldSize: 1,"),
            "line 4: key 'worldSize' is set twice in one mapping",
        ),
        (BENCHMARK + "extra: 1\n", "extra: unknown field (a CheckpointBenchmark has apiVersion"),
        (
            BENCHMARK.replace("NAME", "same") + "---\n" + BENCHMARK.replace("NAME", "same"),
            "in.yaml (document 2): metadata.name: default/same is also ",
        ),
    ],
    ids=["deep", "many-documents", "too-big", "duplicate-key", "unknown-field", "same-name"],
)
def test_bad_input_is_refused_quickly_with_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, says: str
) -> None:
    started = time.monotonic()
    code, out, err = _render(tmp_path, text, capsys)
    assert time.monotonic() - started < 10
    assert code == cli.EXIT_INVALID and out == ""
    assert says in err, err
    assert "Traceback" not in err


def test_one_name_in_two_namespaces_is_two_benchmarks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = BENCHMARK.replace("{name: NAME}", "{name: same, namespace: team-b}")
    code, out, err = _render(tmp_path, BENCHMARK.replace("NAME", "same") + "---\n" + other, capsys)
    assert code == 0, err
    assert len([d for d in yaml.safe_load_all(out) if d]) == 2


def test_without_a_default_image_the_charts_is_used_with_a_note(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CKPTBENCH_DEFAULT_IMAGE", raising=False)
    code = cli.main(["-f", str(ROOT / "examples" / "smoke.yaml")])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert f"the chart's default workload image {CHART_WORKLOAD_IMAGE}" in out.err
    (jobset,) = [d for d in yaml.safe_load_all(out.out) if d]
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == CHART_WORKLOAD_IMAGE


def test_the_default_image_is_the_charts() -> None:
    values = yaml.safe_load((ROOT / "charts/ckptbench/values.yaml").read_text())
    chart = yaml.safe_load((ROOT / "charts/ckptbench/Chart.yaml").read_text())
    image = values["workload"]["image"]
    assert f"{image['repository']}:{image['tag'] or chart['appVersion']}" == CHART_WORKLOAD_IMAGE
