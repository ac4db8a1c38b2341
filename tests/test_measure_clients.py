"""One gcsfs client per rank process, made before any timing and reused by every save and load.

A new client per load (``skip_instance_cache=True``) costs each load a fresh token, connection
pool and TLS handshakes: about 5% slower loads against GCS, and not what a training job does.
Two real worker processes against the GCS emulator, recorded by :mod:`tests.measure_probe`: every
gcsfs file system constructed, and the one each DCP writer and reader was given.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.names import EMULATOR_ENV
from ckptbench.workload.local.emulator import GcsEmulator
from tests import measure_probe, workers
from tests.measure_probe import Rank

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def run(
    gcs_emulator: GcsEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[WorkloadConfig, list[Rank]]]:
    tmp = tmp_path_factory.mktemp("gcsfs")
    bucket = f"clients-{uuid.uuid4().hex[:12]}"
    gcs_emulator.create_bucket(bucket)
    # Automatic collection: the manual setting's full collections would only make the run longer.
    config = workers.small_config(
        f"gs://{bucket}/bench",
        layer_size=100,
        padding_size=5,
        sample_count=2,
        garbage_collection="automatic",
    )
    probe_dir = tmp / "probe"
    probe_dir.mkdir()
    ranks = workers.run(
        config,
        tmp,
        emulator_url=gcs_emulator.url,
        command=measure_probe.COMMAND,
        extra_env={measure_probe.ENV_DIR: str(probe_dir)},
    )
    assert [w.proc.returncode for w in ranks] == [0, 0], workers.logs(ranks)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(EMULATOR_ENV, gcs_emulator.url)  # the results are read back from there
        yield config, measure_probe.read_ranks(config, probe_dir)


def test_each_rank_makes_one_gcsfs_client_before_timing(
    run: tuple[WorkloadConfig, list[Rank]],
) -> None:
    _, ranks = run
    for rank in ranks:
        made = [t for kind, _, t in rank.events if kind == "client"]
        assert len(made) == 1, f"rank {rank.result.rank}: {len(made)} gcsfs clients"
        (opened,) = rank.spans("open_session")
        assert opened[0] <= made[0] <= opened[1]  # made with the session, before any sample
        first_sample = min(start for start, _ in rank.windows("save") + rank.windows("load"))
        assert made[0] < first_sample


def test_every_writer_and_reader_uses_the_rank_s_one_client(
    run: tuple[WorkloadConfig, list[Rank]],
) -> None:
    config, ranks = run
    for rank in ranks:
        clients = [name for kind, name, _ in rank.events if kind == "client"]
        given = [name for kind, name, _ in rank.events if kind == "fs"]
        # A writer and a reader per sample, warm-up included.
        assert len(given) == 2 * (config.warmups + config.samples)
        assert set(given) == set(clients[:1]), f"rank {rank.result.rank}: {len(set(given))} used"
