"""``ckptbench crd``: print the CustomResourceDefinition of one of ckptbench's kinds.

Each is generated from their pydantic spec models; ``crds/`` and the chart hold this output, and
tests fail when they drift from the models.
"""

from __future__ import annotations

import argparse
import sys

from ckptbench.operator.data import crd as data_crd
from ckptbench.operator.spec import crd as benchmark_crd
from ckptbench.operator.sweep import crd as sweep_crd

KINDS = {
    "benchmark": benchmark_crd.crd_yaml,
    "sweep": sweep_crd.crd_yaml,
    "data": data_crd.crd_yaml,
    "data-sweep": sweep_crd.data_crd_yaml,
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="ckptbench crd",
        description="Print a CustomResourceDefinition (YAML): CheckpointBenchmark (the default), "
        "with --kind sweep CheckpointBenchmarkSweep, with --kind data DataLoadingBenchmark, with "
        "--kind data-sweep DataLoadingBenchmarkSweep. "
        f"Regenerate the files with `ckptbench crd > {benchmark_crd.CRD_FILE}`, "
        f"`ckptbench crd --kind sweep > {sweep_crd.CRD_FILE}`, "
        f"`ckptbench crd --kind data > {data_crd.CRD_FILE}` and "
        f"`ckptbench crd --kind data-sweep > {sweep_crd.DATA_CRD_FILE}` (and their copies in the "
        "chart).",
    )
    parser.add_argument("--kind", choices=sorted(KINDS), default="benchmark")
    args = parser.parse_args(argv)
    sys.stdout.write(KINDS[args.kind]())
    return 0
