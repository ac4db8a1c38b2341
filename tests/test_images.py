"""Both images, built from their Dockerfiles and run: the workload image runs a 2-rank benchmark
against its embedded GCS emulator and verifies it; the operator image starts and answers its health
and metrics endpoints. Each runs as its numeric non-root USER and holds no build tools.

Opt-in: `pytest --images tests/test_images.py`, as root with Debian's buildah. The images are
built by scripts/build-images.sh (a local Debian base, the torch wheel on disk) and run with
`buildah run --isolation chroot`, which shares the host's network: servers bind 127.0.0.1.
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

from harness.kmock_cluster import free_port, write_kubeconfig
from harness.operator_process import stop_process, wait_for

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


def buildah(*args: str, timeout: float = 120) -> str:
    result = subprocess.run(
        ["buildah", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"buildah {' '.join(args)}:\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def images() -> None:
    if shutil.which("buildah") is None and shutil.which("apt-get") is None:
        pytest.fail("buildah is missing: install Debian's buildah (scripts/build-images.sh does)")
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


def test_workload_image_runs_a_two_rank_benchmark_and_verifies(
    images: None, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)  # written by the image's user
    with container(WORKLOAD) as name:
        run_in(
            name,
            *("ckptbench", "run", "--world-size", "2", "--layer-size", "1000"),
            *("--padding-size", "4", "--samples", "2", "--warmup", "0", "--json", "/out/run.json"),
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
