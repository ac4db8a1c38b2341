"""The options of ``ckptbench data``: every declared data-loading setting (``contract/data/
settings.py``) made into an option as ``ckptbench run``'s are, beside the runner's own options it
shares with ``ckptbench run`` (where the data goes, its outputs, its timeout)."""

from __future__ import annotations

import argparse

from ckptbench.workload.contract.data import settings as data_settings
from ckptbench.workload.contract.service_settings import ServiceSettings
from ckptbench.workload.local import options as run_options
from ckptbench.workload.local.options import Option

# The runner's options both commands take, as ``ckptbench run`` declares them.
_SHARED_RUNNER = ("--storage", "--emulator", "--timeout", "--verbose", "--json", "--csv")

OPTIONS: tuple[Option, ...] = (
    *(run_options.from_setting(d) for d in data_settings.declared() if not d.setting.runner),
    *(
        Option(
            o.flag,
            o.help.replace("CheckpointBenchmark", "DataLoadingBenchmark"),
            o.field,
            o.parse,
            o.default,
            o.metavar,
            o.sweep,
            o.const,
            ("data_path",) if o.flag == "--storage" else o.answers_for,
        )
        for o in map(run_options.option, _SHARED_RUNNER)
    ),
)

OPTION_OF: dict[str, str] = {
    **{o.field: o.flag for o in OPTIONS if o.field},
    **{f: o.flag for o in OPTIONS for f in o.answers_for},
}

_SERVICE = {d.name for d in data_settings.declared() if d.name in ServiceSettings.model_fields}


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
    groups = {
        "dataset": p.add_argument_group("the dataset and the training step"),
        "service": p.add_argument_group("the storage service"),
        "runner": p.add_argument_group("this machine's run"),
    }
    for o in OPTIONS:
        if o.field is None or o.flag == "--storage":
            group = groups["runner"]
        elif o.field in _SERVICE:
            group = groups["service"]
        else:
            group = groups["dataset"]
        run_options.add_option(group, o)  # type: ignore[arg-type]
    return p
