"""What ``ckptbench run``'s help and options promise, taken at their word (issue 33)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.parse import SpecError, parse_spec
from ckptbench.workload.contract.choices import Backend
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.settings import declared
from ckptbench.workload.contract.storage_settings import CHECKPOINT_PATH_PATTERN, StorageSettings
from ckptbench.workload.local import cli as local_cli
from ckptbench.workload.local import sizes_cli
from ckptbench.workload.local.options import from_setting, option
from ckptbench.workload.local.outputs import compare, document
from ckptbench.workload.storage import clean
from tests import workers
from tests.test_sweep_outputs import _grid

# A switch that turns a true default off does the opposite of what its setting's description
# (written for the CRD field) says; its help once repeated that description.
SWITCH_HELP = {
    "--no-verify": "Skip verifying",
    "--force": "Run even when",
    "--keep-cache": "Backend file: leave the written files in the node's page cache",
    "--no-checksums": "Backend gcs: skip crc32c",
}


@pytest.mark.parametrize("flag", list(SWITCH_HELP))
def test_a_switch_that_turns_a_default_off_says_what_it_does(flag: str) -> None:
    assert option(flag).help.startswith(SWITCH_HELP[flag]), option(flag).help


def test_every_switch_that_turns_a_true_default_off_has_its_own_help() -> None:
    switches = [d for d in declared() if d.field.default is True]
    assert {d.flag for d in switches} == set(SWITCH_HELP)
    for d in switches:
        assert d.setting.switch, f"{d.flag}: no switch help; the description says the opposite"
        assert from_setting(d).help.startswith(d.setting.switch), d.flag


# ---------------------------------------------------------------------------------------------
# Refused by name before anything runs (item 7; the NUL of item 6)


def _run(*argv: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "run", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stderr


@pytest.mark.parametrize("folder", ["/", "/etc", "/etc/ckptbench"])
def test_run_refuses_a_storage_folder_that_clean_would_refuse(folder: str) -> None:
    before = set(Path(folder).parent.iterdir()) if Path(folder).exists() else None
    code, err = _run("--storage", folder)
    assert code == 2 and f"--storage: {folder} " in err and "ckptbench clean" in err, err
    with pytest.raises(clean.Refused):
        clean.check(folder)
    assert not Path("/etc/ckptbench").exists()
    if before is not None:
        assert set(Path(folder).parent.iterdir()) == before


def test_an_option_that_acts_in_none_of_the_runs_backends_is_refused(tmp_path: Path) -> None:
    code, err = _run("--s3-endpoint", "http://127.0.0.1:9", "--storage", "gs://bkt/x")
    assert code == 2 and "--s3-endpoint: acts only with backend s3 or s3fs" in err, err
    code, err = _run("--threads", "4", "--storage", str(tmp_path))
    assert (
        code == 2
        and "--threads: acts only with backend gcs or dataflux; this run's backend is file" in err
    )
    assert list(tmp_path.iterdir()) == []


BAD_BUCKETS = {
    "gs://b..c/p": "no two dots in a row",
    "gs://goog-b/p": "start with 'goog'",
    "gs://my-google-b/p": "hold 'google'",
    "gs://g00gle/p": "hold 'google'",
    "gs://192.168.1.1/p": "not IP addresses",
    "gs://" + "a" * 64 + "/p": "without dots is 3 to 63 long",
    "gs://" + "a" * 64 + ".b/p": "each dot-separated part is at most 63",
}


@pytest.mark.parametrize("url", list(BAD_BUCKETS))
def test_a_gcs_bucket_name_gcs_refuses_is_refused_everywhere(url: str) -> None:
    says = BAD_BUCKETS[url]
    with pytest.raises(ValidationError, match=says):
        StorageSettings(backend=Backend.GCS, checkpoint_path=url)
    with pytest.raises(clean.Refused, match=says):
        clean.check(url)
    code, err = _run("--storage", url, "--emulator")
    assert code == 2 and f"--storage: {url.split('/')[2]!r} is not a bucket name" in err, err
    assert says in err


@pytest.mark.parametrize("url", ["gs://bkt/p", "gs://a.b-c_d/p", "gs://" + "a" * 63 + ".b/p"])
def test_a_good_gcs_bucket_name_is_taken(url: str) -> None:
    assert StorageSettings(backend=Backend.GCS, checkpoint_path=url).checkpoint_path == url


@pytest.mark.parametrize("path", ["/data/a\x00b", "gs://bkt/a\x00b", "s3://bkt/a\x1bb", "/a\x7f"])
def test_a_control_character_in_checkpoint_path_is_refused(path: str) -> None:
    assert not re.fullmatch(CHECKPOINT_PATH_PATTERN, path)  # what the CRD admits
    backend = {"/": Backend.FILE, "g": Backend.GCS, "s": Backend.S3}[path[0]]
    with pytest.raises(ValidationError, match="control character"):
        StorageSettings(backend=backend, checkpoint_path=path)


def test_render_of_a_file_with_no_benchmark_fails(tmp_path: Path) -> None:
    path = tmp_path / "shadow"
    path.write_text("root:*:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ckptbench.cli",
            "render",
            "-f",
            str(path),
            "--default-image",
            "i:1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert (
        f"{path}: holds no CheckpointBenchmark, DataLoadingBenchmark, CheckpointBenchmarkSweep "
        "or DataLoadingBenchmarkSweep" in done.stderr
    )


@pytest.mark.parametrize("host", ["rank0 .svc", "rank0\tsvc", "a/b", ""])
def test_a_worker_host_name_that_is_no_name_is_refused_before_the_rendezvous(
    host: str, tmp_path: Path
) -> None:
    env = workers.base_env()
    env.update(
        CKPTBENCH_BACKEND="file",
        CKPTBENCH_CHECKPOINT_PATH=str(tmp_path),
        CKPTBENCH_LAYER_SIZE="100",
        CKPTBENCH_PADDING_SIZE="2",
        CKPTBENCH_TERMINATION_LOG="",
        CKPTBENCH_WORLD_SIZE="2",
        CKPTBENCH_RANK="1",
        CKPTBENCH_MASTER_ADDR=host,
        CKPTBENCH_MASTER_PORT="9",
        CKPTBENCH_RENDEZVOUS_TIMEOUT_SECONDS="60",
    )
    started = time.monotonic()
    done = subprocess.run(
        workers.WORKER, cwd=workers.ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert time.monotonic() - started < 30, "waited for the rendezvous"
    assert done.returncode == 2, done.stderr
    assert "CKPTBENCH_MASTER_ADDR" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("host", ["rank0.bench.ns.svc", "10.0.0.7", "::1", "[fe80::1]", "h_1"])
def test_a_host_name_or_address_is_taken(host: str) -> None:
    config = WorkloadConfig(rank=0, world_size=1, checkpoint_path="gs://bkt/x", master_addr=host)
    assert config.master_addr == host


def test_resource_claims_are_refused_by_name() -> None:
    raw = {
        "worldSize": 1,
        "backend": "gcs",
        "checkpointPath": "gs://bkt/x",
        "resources": {"limits": {"cpu": "1"}, "claims": [{"name": "gpu"}]},
    }
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    assert "resources" in str(info.value) and "'claims'" in str(info.value), info.value
    crd_resources = CheckpointBenchmarkSpec.model_json_schema()["properties"]["resources"]
    assert "claims" not in json.dumps(crd_resources)


# ---------------------------------------------------------------------------------------------
# Reported truly (item 9)


def test_sizes_mlperf_takes_the_comma_list_its_help_promises(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert sizes_cli.main(["--mlperf", "--model", "llama3-8b,mlperf-llama3-70b", "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert len(reports) == 2 and all("mlperf_v3" in r for r in reports), reports
    with pytest.raises(SystemExit):
        sizes_cli.main(["--mlperf", "--model", "llama3-8b,llama3-70b"])
    assert "--mlperf: llama3-70b is none of" in capsys.readouterr().err


def test_the_s3_endpoint_from_the_environment_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://store.example:9000")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    config = WorkloadConfig(rank=0, world_size=1, backend=Backend.S3, checkpoint_path="s3://bkt/x")
    recorded = local_cli.settings(config, None)
    assert recorded["s3_endpoint"] == "https://store.example:9000"
    assert recorded["s3_region"] == "eu-west-3"
    given = config.model_copy(update={"s3_endpoint": "http://10.0.0.1:9000"})
    assert local_cli.settings(given, None)["s3_endpoint"] == "http://10.0.0.1:9000"


def _with_settings(settings: dict[str, Any]) -> document.Document:
    runs = [
        (label, s.model_copy(update={"extra": {**s.extra, "settings": {**settings}}}))
        for label, s in _grid()[:1]
    ]
    return document.Document(Path("x.json"), True, runs)


def test_compare_does_not_call_an_embedded_emulators_port_a_setting() -> None:
    a = _with_settings({"backend": "gcs", "emulator": "http://127.0.0.1:41234"})
    b = _with_settings({"backend": "gcs", "emulator": "http://127.0.0.1:52843"})
    assert "settings differ" not in compare.format_comparison([a, b])
    c = _with_settings({"backend": "gcs", "emulator": "http://gcs.lab.example:4443"})
    assert "settings differ: emulator" in compare.format_comparison([a, c])


@pytest.mark.parametrize("kubeconfig", [None, "missing", "garbage"])
def test_the_operator_without_a_cluster_says_so_without_a_traceback(
    kubeconfig: str | None, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    if kubeconfig is not None:
        path = tmp_path / "config"
        if kubeconfig == "garbage":
            path.write_text("{{{ not yaml")
        env["KUBECONFIG"] = str(path)
    done = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "operator", "--metrics-port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "ckptbench operator: error: no cluster to run against" in done.stderr
    assert "kubeconfig" in done.stderr
