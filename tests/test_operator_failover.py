"""Two operator replicas in one kopf peering against one kmock: one works, the other waits; the
leader killed outright mid-benchmark, the other takes over. No reconcile lost (the status reaches
Succeeded with every rank's figures), none doubled (one JobSet creation; the waiting replica
writes nothing while the leader lives)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ckptbench.operator.spec import names as spec_names
from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from harness.kmock_cluster import Client, EmulatorThread, running_emulator, write_kubeconfig
from harness.operator_process import Operator, wait_for
from tests.test_operator_kmock import (
    CKB,
    JOBSET,
    LAYER,
    NS,
    PADDING,
    WORLD,
    benchmark,
    jobset_posts,
    phase_is,
    rank_pod,
    status_of,
)

PEERING = "ckptbench"
PEERINGS = "kopf.dev/v1"
# Seconds a replica's record lasts unrenewed: short when the leader is killed outright (the
# follower waits that long), kopf's 60 when it is stopped, which must not make anyone wait.
KILLED_LIFETIME, STOPPED_LIFETIME = 3, 60


def writes_by(emulator: EmulatorThread, token: str, plural: str) -> list[str]:
    """The writes (method and subresource) one replica made to objects of ``plural``."""
    assert emulator.emulator is not None
    return [
        f"{r.method} {r.subresource or ''}".strip()
        for r in list(emulator.emulator._requests)
        if r.method in ("POST", "PUT", "PATCH", "DELETE")
        and r.resource is not None
        and r.resource.plural == plural
        and r.headers.get("Authorization") == f"Bearer {token}"
    ]


def peers(client: Client) -> dict[str, Any]:
    found = client.get(PEERINGS, "kopfpeerings", NS, PEERING) or {}
    return dict(found.get("status") or {})


def joined(client: Client, count: int) -> Callable[[], bool]:
    return lambda: len(peers(client)) == count


def result(rank: int) -> str:
    return RankResult(
        rank=rank,
        bytes=sizes.shard_bytes(rank, WORLD, LAYER, PADDING),
        save=OpTiming.of([1.0 + rank / 10, 2.0 + rank / 10], [1.0, 2.0]),
        load=OpTiming.of([0.5, 0.5], [0.4, 0.4]),
        verified=True,
    ).to_termination_message()


@pytest.fixture
def replicas(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[EmulatorThread, Client, list[Operator]]]:
    lifetime = int(request.param)
    with running_emulator() as emulator:
        client = Client(emulator.url)
        client.create(
            PEERINGS,
            "kopfpeerings",
            {"apiVersion": PEERINGS, "kind": "KopfPeering", "metadata": {"name": PEERING}},
        )
        args = ["--peering", PEERING, "--peering-lifetime", str(lifetime)]
        # A resync every second: a waiting replica that reconciled on its own clock would show.
        args += ["--resync-seconds", "1"]
        started: list[Operator] = []
        try:
            for token in ("first", "second"):
                operator = Operator(
                    write_kubeconfig(tmp_path / f"{token}.kubeconfig", emulator.url, NS, token),
                    tmp_path / f"{token}.log",
                    NS,
                    extra_args=args,
                )
                operator.start()
                started.append(operator)
                wait_for(f"{token} in the peering", joined(client, len(started)))
            yield emulator, client, started
        finally:
            for operator in started:
                operator.stop()


def priority(operator: Operator, seen: dict[str, Any]) -> int:
    """The replica's priority in the peering (its identity ends with its process id)."""
    assert operator.proc is not None
    return int(next(p for i, p in seen.items() if i.endswith(f"/{operator.proc.pid}"))["priority"])


def reconciles(operator: Operator) -> float:
    """Every reconcile the replica ran, by its own metric."""
    pattern = r"^ckptbench_operator_reconciles_total\{[^}]*\} (\S+)$"
    return sum(float(n) for n in re.findall(pattern, operator.metrics(), re.MULTILINE))


@pytest.mark.parametrize(
    ("replicas", "stop"),
    [(KILLED_LIFETIME, "kill"), (STOPPED_LIFETIME, "terminate")],
    indirect=["replicas"],
    ids=["killed", "stopped"],
)
def test_the_leader_gone_mid_benchmark_is_replaced_with_no_reconcile_lost_or_doubled(
    replicas: tuple[EmulatorThread, Client, list[Operator]], stop: str
) -> None:
    """Killed outright (a lost node), the leader is replaced once its record lapses; stopped
    (an upgrade, a drain), it leaves the peering as it goes and is replaced at once."""
    emulator, client, (first, second) = replicas
    seen = peers(client)
    # The replica started last has the higher priority: it leads, the first waits.
    leader, follower = sorted((first, second), key=lambda op: priority(op, seen), reverse=True)
    tokens = {id(first): "first", id(second): "second"}
    wait_for("the follower to pause", lambda: "Pausing operations" in follower.log.read_text())

    client.create(CKB, spec_names.PLURAL, benchmark("failover"))
    wait_for("the JobSet", lambda: client.get(JOBSET, "jobsets", NS, "failover"))
    for rank in range(WORLD // 2):
        client.create("v1", "pods", rank_pod("failover", rank, "Succeeded", result(rank), 0))
    wait_for(
        "half the ranks in the status",
        lambda: status_of(client, "failover").get("ranksReported") == WORLD // 2,
    )
    # Resyncs pass (one a second, on each replica's clock): the follower must run none.
    done = reconciles(leader)
    wait_for("three more reconciles of the leader", lambda: reconciles(leader) >= done + 3)
    assert reconciles(follower) == 0
    waiting = tokens[id(follower)]
    assert writes_by(emulator, waiting, spec_names.PLURAL) == []
    assert writes_by(emulator, waiting, "jobsets") == []
    assert writes_by(emulator, tokens[id(leader)], spec_names.PLURAL)  # the leader did write

    assert leader.proc is not None
    if stop == "kill":
        leader.proc.kill()  # no goodbye: its peering record lapses after KILLED_LIFETIME s
        leader.proc.wait(timeout=10)
        leader.proc = None
    else:
        leader.stop()  # SIGTERM: kopf removes its record on the way out
    # The rest of the ranks report while no replica leads.
    for rank in range(WORLD // 2, WORLD):
        client.create("v1", "pods", rank_pod("failover", rank, "Succeeded", result(rank), 0))

    # Well within STOPPED_LIFETIME: a stopped leader does not hold the follower back.
    status = wait_for("status Succeeded", phase_is(client, "failover", "Succeeded"), 25)
    assert (status["ranksReported"], status["ranksSummary"]) == (WORLD, f"{WORLD}/{WORLD}")
    # Per sample, a save lasts as long as its slowest rank (3 of 4): [1.3, 2.3] -> mean 1.8.
    assert status["save"]["meanSeconds"] == pytest.approx(1.8)
    assert status["checkpointBytes"] == sizes.total_bytes(LAYER, PADDING)
    assert jobset_posts(emulator) == 1
    assert "status" in writes_by(emulator, waiting, spec_names.PLURAL)[-1]
