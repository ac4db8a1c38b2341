"""Shared fixtures. Servers bind 127.0.0.1 on free ports and stop when their tests end."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from google.cloud import storage

    from ckptbench.workload.local.loopback.xml_multipart import XmlMultipartShim
    from harness.kmock_cluster import Client, EmulatorThread
    from harness.operator_process import Operator


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--e2e",
        action="store_true",
        default=False,
        help="run end-to-end tests against a kind cluster made by e2e/setup-kind.sh",
    )
    parser.addoption(
        "--images",
        action="store_true",
        default=False,
        help="build both images with scripts/build-images.sh (root, buildah) and run them",
    )


# Opt-in test groups: marker -> (its option, why it is skipped without it).
OPT_IN = {
    "e2e": ("--e2e", "end-to-end test: pass --e2e to run it against a real cluster"),
    "images": ("--images", "image test: pass --images to build and run the images with buildah"),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, (option, reason) in OPT_IN.items():
        if config.getoption(option):
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[object]:
    """A real fake-gcs-server process for the whole session (its own temporary folder)."""
    from ckptbench.workload.local.emulator import GcsEmulator

    with GcsEmulator() as emu:
        yield emu


@pytest.fixture
def gcs_bucket(gcs_emulator: object) -> str:
    """A fresh bucket per test, so tests never see each other's objects."""
    from ckptbench.workload.local.emulator import GcsEmulator

    assert isinstance(gcs_emulator, GcsEmulator)
    name = f"t-{uuid.uuid4().hex[:12]}"
    gcs_emulator.create_bucket(name)
    return name


@pytest.fixture
def gcs_client(gcs_emulator: object, monkeypatch: pytest.MonkeyPatch) -> storage.Client:
    """A client of the emulator, made as the gcs backend makes its own; the test's backends find
    the emulator by the same environment variable."""
    from ckptbench.workload.local.emulator import GcsEmulator
    from ckptbench.workload.storage.gcs.client import make_client

    assert isinstance(gcs_emulator, GcsEmulator)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.url)
    return make_client(pool_size=8)


@pytest.fixture
def shim(gcs_emulator: object) -> Iterator[XmlMultipartShim]:
    """The XML multipart upload shim in front of the session's emulator; it must leave no part
    file behind when it stops."""
    from ckptbench.workload.local.emulator import GcsEmulator
    from ckptbench.workload.local.loopback.xml_multipart import XmlMultipartShim

    assert isinstance(gcs_emulator, GcsEmulator)
    with XmlMultipartShim(gcs_emulator.url, timeout=60).running() as running:
        yield running
    assert running.part_files() == [], "the stopped shim left part files behind"


@pytest.fixture
def quiet_dcp() -> Iterator[None]:
    """DCP warns that it runs without a process group: expected in single-process tests."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


# -- the kmock cluster and the operator process, for the tests that run the real operator ------
# Module-scoped: one emulator and one operator per test module, watching "default". Imported when
# used, as the GCS emulator is, so tests that need neither load neither.


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorThread]:
    from harness.kmock_cluster import running_emulator

    with running_emulator() as emu:
        yield emu


@pytest.fixture(scope="module")
def client(emulator: EmulatorThread) -> Client:
    from harness.kmock_cluster import Client

    return Client(emulator.url)


@pytest.fixture(scope="module")
def operator(
    emulator: EmulatorThread, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    from harness.operator_process import running_operator

    with running_operator(emulator.url, tmp_path_factory.mktemp("operator")) as op:
        yield op


@pytest.fixture(scope="session")
def s3_server() -> Iterator[object]:
    """A real S3 server (moto's, its own process) for the whole session."""
    from ckptbench.workload.local.s3_server import S3Server

    with S3Server() as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server: object, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket per test; this process's AWS clients (boto3, the CRT's, s3fs's) go to the
    server through the standard variables, as ranks' do."""
    from ckptbench.workload.local.s3_server import S3Server
    from ckptbench.workload.storage.s3 import where

    assert isinstance(s3_server, S3Server)
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(where, "_configured", None)
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(name)
    return name
