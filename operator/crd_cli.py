"""``ckptbench crd``: print the CustomResourceDefinition of one of ckptbench's kinds.

Both are generated from their pydantic spec models; ``crds/`` and the chart hold this output, and
tests fail when they drift from the models.
"""

from __future__ import annotations

import argparse
import sys

from ckptbench.operator.spec import crd as benchmark_crd
from ckptbench.operator.sweep import crd as sweep_crd

KINDS = {"benchmark": benchmark_crd.crd_yaml, "sweep": sweep_crd.crd_yaml}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="ckptbench crd",
        description="Print a CustomResourceDefinition (YAML): CheckpointBenchmark (the default) "
        f"or, with --kind sweep, CheckpointBenchmarkSweep. Regenerate the files with "
        f"`ckptbench crd > {benchmark_crd.CRD_FILE}` and "
        f"`ckptbench crd --kind sweep > {sweep_crd.CRD_FILE}` (and their copies in the chart).",
    )
    parser.add_argument("--kind", choices=sorted(KINDS), default="benchmark")
    args = parser.parse_args(argv)
    sys.stdout.write(KINDS[args.kind]())
    return 0
