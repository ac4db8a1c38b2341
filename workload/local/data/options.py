"""The options of ``ckptbench data``: every declared data-loading setting (``contract/data/
settings.py``) made into an option as ``ckptbench run``'s are, beside the runner's own options it
shares with ``ckptbench run`` (where the data goes, its outputs, its timeout)."""

from __future__ import annotations

import argparse
import dataclasses

from ckptbench.workload.contract.data import settings as data_settings
from ckptbench.workload.local import options as run_options
from ckptbench.workload.local.options import Option

# The runner's options both commands take, as ``ckptbench run`` declares them.
_SHARED_RUNNER = (
    "--filename", "--storage", "--emulator", "--timeout", "--verbose", "--json", "--csv",
)  # fmt: skip

OPTIONS: tuple[Option, ...] = (
    *(run_options.from_setting(d) for d in data_settings.declared() if not d.setting.runner),
    *(
        dataclasses.replace(
            o,
            help=o.help.replace(
                "CheckpointBenchmark or CheckpointBenchmarkSweep (axes)",
                "DataLoadingBenchmark or DataLoadingBenchmarkSweep (axes)",
            ).replace("CheckpointBenchmark", "DataLoadingBenchmark"),
            answers_for=("data_path",) if o.flag == "--storage" else o.answers_for,
        )
        for o in map(run_options.option, _SHARED_RUNNER)
    ),
)

OPTION_OF: dict[str, str] = {
    **{o.field: o.flag for o in OPTIONS if o.field},
    **{f: o.flag for o in OPTIONS for f in o.answers_for},
}

GROUPS: dict[str, str] = {
    **run_options.room_groups(data_settings.DataSettings),
    "runner": run_options.RUNNER_GROUP,
}


def option(flag: str) -> Option:
    for o in OPTIONS:
        if o.flag == flag:
            return o
    raise KeyError(flag)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="ckptbench data",
        description=(
            "Benchmark reading a training dataset with N local ranks, each with its emulated "
            "accelerators and their DataLoaders. With no --storage an embedded emulator "
            "(GCS's, or an S3 server for readers s3 and s3fs) is started and stopped; the "
            "dataset is made the first time and reused after. Options marked LIST take a comma "
            "list; the run then measures every combination (one cell each) in turn."
        ),
    )
    run_options.add_options(p, OPTIONS, GROUPS)
    return p
