"""``ckptbench run``'s option table: comma lists become cells, bad values name their option."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from ckptbench.workload.contract.cells import MAX_CELLS
from ckptbench.workload.contract.choices import Backend, GarbageCollection, Procedure
from ckptbench.workload.local import options
from ckptbench.workload.local.plan import Plan, plan


def _plan(*argv: str) -> Plan:
    return plan(options.build_parser().parse_args(list(argv)))


def test_lists_make_the_cross_product_in_order() -> None:
    p = _plan("--backend", "gcs,gcsfs", "--threads", "4,16")
    got = [(c.config.backend, c.config.threads) for c in p.cells]
    assert got == [
        (Backend.GCS, 4),
        (Backend.GCS, 16),
        (Backend.GCSFS, 4),
        (Backend.GCSFS, 16),
    ]
    assert [c.label for c in p.cells] == [
        "gcs threads=4",
        "gcs threads=16",
        "gcsfs threads=4",
        "gcsfs threads=16",
    ]
    assert p.cells[1].axes == {"backend": "gcs", "threads": "16"}
    assert len({c.config.run_id for c in p.cells}) == 4


def test_a_single_value_is_one_cell_labelled_by_its_backend() -> None:
    [cell] = _plan("--threads", "4").cells
    assert cell.label == "gcs" and cell.axes == {}
    assert cell.config.threads == 4


def test_every_value_option_that_sets_the_config_takes_a_list() -> None:
    axes = {o.flag for o in options.OPTIONS if o.is_axis}
    assert {"--backend", "--threads", "--part-size", "--world-size", "--samples"} <= axes
    # Where and how long are one per run, not settings to compare.
    assert not {"--storage", "--timeout", "--json", "--project"} & axes
    p = _plan("--part-size", "8MiB,16MiB", "--world-size", "1,2")
    assert [(c.config.part_size_bytes >> 20, c.config.world_size) for c in p.cells] == [
        (8, 1),
        (16, 1),
        (8, 2),
        (16, 2),
    ]
    assert p.cells[0].label == "gcs world-size=1 part-size=8MiB"


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--threads", "4,x"], ["--threads", "'x'"]),
        (["--threads", "4,,8"], ["--threads", "empty"]),
        (["--threads", "4,4"], ["--threads", "twice"]),
        (["--part-size", "8MiB,lots"], ["--part-size", "not a size"]),
        # The config's own check, naming the option and the cell it failed in.
        (["--threads", "4,0"], ["--threads", "threads=0"]),
        # A procedure's own settings, and a storage URL with no bucket.
        (["--procedure", "mlperf", "--samples", "3"], ["--samples", "10 writes"]),
        (["--procedure", "reference", "--warmup", "1"], ["--warmup", "no warm-up"]),
        (["--procedure", "fast"], ["--procedure", "'fast'", "mlperf"]),
        (["--gc", "never"], ["--gc", "'never'", "manual, automatic"]),
        (["--storage", "gs://"], ["--storage", "no bucket"]),
    ],
)
def test_bad_values_name_the_option(argv: list[str], names: list[str]) -> None:
    with pytest.raises(options.UsageError) as info:
        _plan(*argv)
    for name in names:
        assert name in str(info.value)


def test_cell_count_is_bounded_naming_the_lists() -> None:
    threads = ",".join(str(n) for n in range(1, 33))
    assert len(_plan("--backend", "gcs,gcsfs", "--threads", threads).cells) == MAX_CELLS
    with pytest.raises(options.UsageError) as info:
        _plan("--backend", "gcs,gcsfs", "--threads", threads, "--seed", "1,2")
    assert "--seed 2 x --backend 2 x --threads 32: 128 cells" in str(info.value)


def test_error_names_come_from_the_table() -> None:
    assert options.OPTION_OF["threads"] == "--threads"
    assert options.OPTION_OF["checkpoint_path"] == "--storage"
    assert options.OPTION_OF["collective_timeout_seconds"] == "--timeout"


@pytest.mark.parametrize(
    ("parse", "text", "member", "valid"),
    [
        (options.option("--backend").parse, "GCSfs", Backend.GCSFS, "file, gcs, gcsfs"),
        (
            options.option("--procedure").parse,
            "MLPerf",
            Procedure.MLPERF,
            "ckptbench, reference, mlperf",
        ),
        (
            options.option("--gc").parse,
            "Automatic",
            GarbageCollection.AUTOMATIC,
            "manual, automatic",
        ),
    ],
)
def test_named_values_are_read_in_any_case_and_a_bad_one_lists_the_valid(
    parse: Callable[[str], object], text: str, member: object, valid: str
) -> None:
    assert parse(text) is member
    with pytest.raises(argparse.ArgumentTypeError, match=f"{text}x.*choose from {valid}"):
        parse(text + "x")


def test_multipart_against_the_embedded_emulator_is_refused_before_anything_starts() -> None:
    with pytest.raises(options.UsageError, match="--upload-scheme multipart: the embedded"):
        _plan("--upload-scheme", "compose,multipart")
    # On a bucket the user names (GCS, or an emulator of theirs with the XML API), it is theirs.
    cells = _plan("--storage", "gs://bkt/x", "--upload-scheme", "compose,multipart").cells
    assert [c.config.upload_scheme.value for c in cells] == ["compose", "multipart"]
    assert [c.config.upload_scheme.value for c in _plan().cells] == ["auto"]


@pytest.mark.parametrize(
    ("argv", "suggested"),
    [
        (["--wor", "2"], "--world-size"),  # a prefix: argparse used to take it as --world-size
        (["--world-sise", "2"], "--world-size"),  # a typo
        (["--stor=/tmp"], "--storage"),
    ],
)
def test_an_option_is_never_abbreviated_and_a_misspelt_one_gets_a_suggestion(
    argv: list[str], suggested: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        options.build_parser().parse_args(argv)
    assert exit_.value.code == 2
    assert f"unrecognized arguments: {' '.join(argv)} (did you mean {suggested}?)" in (
        capsys.readouterr().err
    )
