"""Descriptions users read say what the code does, and keep saying it when the code changes."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.workload.contract.choices import Backend, Procedure, UploadScheme
from ckptbench.workload.contract.results.mlperf_figures import mlperf_metrics
from ckptbench.workload.contract.results.summaries import OpSummary
from ckptbench.workload.rank import content, state
from ckptbench.workload.storage.gcs import multipart, upload

ROOT = Path(__file__).resolve().parent.parent


def test_the_gcs_backend_is_described_as_the_uploads_it_does() -> None:
    # Each scheme's module names it first; change it there and these texts must follow.
    composite = (upload.__doc__ or "").strip().splitlines()[0].lower()
    assert composite.startswith("parallel composite upload"), composite
    xml = (multipart.__doc__ or "").strip().splitlines()[0]
    assert xml.startswith("GCS's XML API multipart upload"), xml
    fields = CheckpointBenchmarkSpec.model_fields
    assert "uploadScheme" in (fields["backend"].description or "")
    schemes = fields["upload_scheme"].description or ""
    for words in ("XML multipart upload", "parallel composite upload", "auto (multipart on GCS"):
        assert words in schemes, words
    assert UploadScheme.AUTO.resolve(None) is UploadScheme.MULTIPART
    gcs_examples = [
        p for p in (ROOT / "examples").glob("*.yaml") if "Backend gcs:" in p.read_text()
    ]
    assert gcs_examples
    for path in gcs_examples:
        text = path.read_text().replace("\n# ", " ")
        assert "XML multipart upload, uploadScheme auto" in text, path
        assert "composed" not in text and "uploadScheme:" not in text, path


def _op(seconds: float) -> OpSummary:
    return OpSummary(
        samples=2, mean_seconds=seconds, stdev_seconds=0.0, p50_seconds=seconds,
        p90_seconds=seconds, max_seconds=seconds, min_seconds=seconds,
        throughput_bytes_per_second=1.0, min_rank_throughput_bytes_per_second=1.0,
        slowest_rank=0, slowest_rank_seconds=seconds, fastest_rank_seconds=seconds,
        seconds=[seconds, seconds],
    )  # fmt: skip


def test_measurement_doc_names_every_procedure_and_mlperf_figure() -> None:
    doc = (ROOT / "docs" / "measurement.md").read_text()
    for procedure in Procedure:
        assert f"**`{procedure.value}`**" in doc, procedure
    keys = mlperf_metrics(_op(1.0), _op(2.0), 2**30)
    for key in keys:
        if "_min_rank_" in key or "_median_rank_" in key:
            continue  # documented together as checkpoint_{write,read}_{min,median}_rank_gibps
        assert f"`{key}`" in doc or key.startswith("load_"), key
    assert "checkpoint_{write,read}_{min,median}_rank_gibps" in doc


def test_measurement_doc_says_every_template_element_is_marked_before_its_load() -> None:
    doc = " ".join((ROOT / "docs" / "measurement.md").read_text().split())
    assert "every element of the template is set to NaN" in doc
    template = {"t": torch.empty(3 * content.BLOCK + 5)}
    state.mark_unwritten(template)
    assert torch.isnan(template["t"]).all()  # the order (before the timing): tests/test_loop.py


def test_every_bench_script_the_docs_name_exists() -> None:
    named: set[str] = set()
    for doc in (ROOT / "docs").glob("*.md"):
        named |= set(re.findall(r"`(bench/[a-z_]+\.py)`", doc.read_text()))
    assert {"bench/bench_measure.py", "bench/file_vs_raw.py", "bench/rawio.py"} <= named
    for name in named:
        assert (ROOT / name).is_file(), name


def test_the_readme_layout_names_every_bench_script() -> None:
    readme = (ROOT / "README.md").read_text()
    for script in sorted((ROOT / "bench").glob("*.py")):
        assert f"`{script.name}`" in readme, script.name


def test_the_readme_counts_its_backends_right() -> None:
    readme = (ROOT / "README.md").read_text()
    found = re.search(
        r"\n(\w+) storage backends:\n\n\| backend .*\n\| --- .*\n((?:\|.*\n)+)", readme
    )
    assert found, "the README's table of storage backends moved"
    words = {"three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
    rows = [line.split("`")[1] for line in found.group(2).splitlines()]
    assert sorted(rows) == sorted(b.value for b in Backend)
    assert words.get(found.group(1).lower()) == len(rows), found.group(1)


def test_the_readme_says_how_long_its_two_commands_take() -> None:
    start = (ROOT / "README.md").read_text().split("## Start here", 1)[1].split("\n## ", 1)[0]
    setup, tests = start.split("./scripts/test.sh", 1)
    assert re.search(r"setup took [\d.]+ minutes", setup), "no duration for setup and run"
    assert re.search(r"run [\d.]+ to [\d.]+ minutes", setup), "no duration for the run"
    assert re.search(r"\d+ minutes on 2 cores", tests), "no duration for the tests"


def test_every_metric_family_the_operator_exports_is_defined_in_the_docs() -> None:
    """Each family of the operator's registry is named in docs/ (operator.md lists them with
    their labels; the sweep's and the training step's are in their own pages)."""
    from ckptbench.operator.runtime import metrics

    docs = "\n".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    families = {f.name for f in metrics.REGISTRY.collect()}
    assert any(name.startswith("ckptbench_data_") for name in families)
    undefined = sorted(name for name in families if not re.search(rf"`{name}(_total)?[{{`]", docs))
    assert not undefined, f"metrics the docs do not define: {undefined}"
