"""``ckptbench data -f FILE``: the DataLoadingBenchmark (or sweep) a cluster would take, run here.

As ``ckptbench run -f`` does for a CheckpointBenchmark (``manifest_run.py``): the file is read and
validated as the operator reads it (the same strict YAML, the same spec model and rules, the same
messages), then each data setting the spec sets becomes its declared ``ckptbench data`` option
(``contract/data/settings.py``; dataPath becomes --storage). Options typed on the command line come
after, so they win, and the run names the ones they replaced. A DataLoadingBenchmarkSweep's
template is read so, and its axes become comma lists, as ``ckptbench run -f`` does for a
CheckpointBenchmarkSweep. What only a cluster has (image, resources, volumes, scheduling) does not
apply here, and the run says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from ckptbench.manifest_run import (
    ManifestProblem,
    axes_options,
    cluster_only_note,
    read_documents,
    run_with_file,
    settings_options,
    the_one,
)
from ckptbench.operator.data.model import parse_data_spec
from ckptbench.operator.data.names import KIND
from ckptbench.operator.spec.names import KIND as CHECKPOINT_KIND
from ckptbench.operator.spec.parse import SpecError
from ckptbench.operator.sweep.cells import DATA_SWEEP_KIND, SWEEP_KIND
from ckptbench.operator.sweep.model import DataLoadingBenchmarkSweepSpec, parse_sweep_of
from ckptbench.workload.contract.data.settings import DataSettings, declared
from ckptbench.workload.local.data import cli as data_cli
from ckptbench.workload.local.data.options import OPTION_OF, option
from ckptbench.workload.local.options import Option


def main(argv: Sequence[str]) -> int:
    return run_with_file(argv, "data", data_cli.main, options_of)


def _option_of(name: str) -> Option:
    return option(OPTION_OF[name])


def options_of(path: str) -> tuple[list[str], list[str]]:
    """``ckptbench data`` options for the one DataLoadingBenchmark or sweep in ``path``, and
    notes."""
    elsewhere = dict.fromkeys((CHECKPOINT_KIND, SWEEP_KIND), "ckptbench run")
    document, notes = the_one(
        path,
        read_documents(path),
        (KIND, DATA_SWEEP_KIND),
        "DataLoadingBenchmarks or sweeps",
        elsewhere,
    )
    try:
        if document.get("kind") == DATA_SWEEP_KIND:
            sweep = parse_sweep_of(DataLoadingBenchmarkSweepSpec, document.get("spec"))
            spec = sweep.template
            axes = axes_options(sweep.axes, path, _option_of)
        else:
            spec = parse_data_spec(document.get("spec"))
            axes = []
    except (SpecError, ValueError) as exc:
        raise ManifestProblem(f"{path}: {exc}") from None
    options = settings_options(spec, declared(), _option_of) + axes
    return options, notes + cluster_only_note(spec, DataSettings)
