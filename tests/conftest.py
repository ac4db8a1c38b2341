"""Shared fixtures. Servers bind 127.0.0.1 on free ports and stop when their tests end."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--e2e",
        action="store_true",
        default=False,
        help="run end-to-end tests against a kind cluster made by e2e/setup-kind.sh",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--e2e"):
        return
    skip = pytest.mark.skip(reason="end-to-end test: pass --e2e to run it against a real cluster")
    for item in items:
        if "e2e" in item.keywords:
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
