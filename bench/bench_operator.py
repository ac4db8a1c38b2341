"""Operator figures: status aggregation time and size by world size, render time, and reconcile
latency (CheckpointBenchmark created -> JobSet exists) of the real operator against kmock.

Targets: aggregation < 1 s at every size (100,000 ranks included), status < 256 KiB. Each rank's
message is what a worker writes (harness/rank_pods.py: save, load and delete with their samples,
resources; ~3.6 KiB), and the pods are decoded afresh for each reconcile, in name order, as the
operator's list call gives them. The operator keeps, per benchmark, what its last reconcile read
(operator/status/memo.py), so three reconciles are timed, interleaved in each repeat:

- ``one new``: one rank's result arrived since the last reconcile, which saw its pod running:
  what a running benchmark's reconciles do. The target is set on this one.
- ``unchanged``: nothing new since the last reconcile (a resync, a pod event that changed no
  result).
- ``cold``: nothing kept (the operator has just started): every message is read.

Each row gives the median, best and worst wall time of the repeats, the CPU median and per
rank, what the memo keeps per rank (tracemalloc), and the status's size. The 100,000-rank row
holds over a gigabyte (the pods as JSON text and decoded, and the memo) and takes minutes.

The whole reconcile, the pod read included, before (a list call) and after (the watch-fed pod
index), one pod changed, interleaved: bench_whole_reconcile below.

    .venv/bin/python bench/bench_operator.py [--ranks 1000 10000 100000] [--repeats 5]
        [--creations 5] [--status-only | --whole-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ckptbench.operator.render import jobset as rendering
from ckptbench.operator.render import labels as render_labels
from ckptbench.operator.render.jobset import RenderDefaults, render_jobset
from ckptbench.operator.render.labels import benchmark_labels
from ckptbench.operator.runtime import kube
from ckptbench.operator.runtime import reconcile as rec
from ckptbench.operator.spec import names as spec_names
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec, canonical_json
from ckptbench.operator.spec.status_schema import status_body
from ckptbench.operator.status.compute import compute_status
from ckptbench.operator.status.memo import StatusMemo
from ckptbench.operator.status.pods import COMPLETION_INDEX, kept
from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.state_settings import MAX_WORLD_SIZE
from harness import rank_pods
from harness.kmock_cluster import Client, running_emulator, write_kubeconfig
from harness.operator_process import Operator, wait_for

AGGREGATION_TARGET_SECONDS = 1.0
STATUS_TARGET_BYTES = 256 * 1024


def pods_text(world: int, samples: int) -> str:
    """The rank pods' list as the API server sends it: JSON, in name order, each pod carrying the
    termination message its worker writes (every field a successful rank reports, values of its
    own). Decoded afresh for each reconcile, as the operator's list call does."""
    shard = sizes.shard_bytes(0, world, 100_000, world)
    pods = [
        rank_pods.rank_pod(
            "bench", rank, rank_pods.rank_result(rank, shard, samples).to_termination_message()
        )
        for rank in range(world)
    ]
    return json.dumps(rank_pods.listed(pods))


@dataclass(frozen=True)
class WorldSpec:
    """What compute_status reads of a spec (its RunSpec), for any world size: the spec model caps
    worldSize below the largest size measured here."""

    world_size: int
    total_bytes: int
    max_restarts: int = 0
    queue_name: str | None = None
    load_world_size: int | None = None

    @property
    def rank_count(self) -> int:
        return max(self.world_size, self.load_world_size or 0)


def _running(pods: list[dict[str, Any]], rank: int) -> list[dict[str, Any]]:
    """The pods as a reconcile saw them while ``rank``'s worker still ran."""
    pod = next(p for p in pods if p["metadata"]["annotations"].get(COMPLETION_INDEX) == str(rank))
    pod["status"] = {"phase": "Running", "startTime": pod["status"]["startTime"]}
    return pods


def _kept_per_rank(text: str, the_spec: WorldSpec, ranks: int) -> float:
    """Bytes the memo holds per rank after one reconcile (tracemalloc: Python allocations)."""
    jobset = {"metadata": {"name": "bench"}, "spec": {}, "status": {}}
    pods = json.loads(text)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    memo = StatusMemo()
    compute_status(the_spec, jobset, pods, None, datetime.now(UTC), memo=memo)
    del pods  # the reconcile's own list goes; the memo stays
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del memo
    return kept / ranks


def bench_status(ranks: int, repeats: int) -> None:
    the_spec = WorldSpec(world_size=ranks, total_bytes=sizes.total_bytes(100_000, ranks))
    text = pods_text(ranks, 8)
    jobset = {"metadata": {"name": "bench"}, "spec": {}, "status": {}}
    now = datetime.now(UTC)
    wall: dict[str, list[float]] = {"one new": [], "unchanged": [], "cold": []}
    cpu: dict[str, list[float]] = {k: [] for k in wall}
    body: dict[str, Any] = {}
    bodies = set()

    def timed(kind: str, memo: StatusMemo, pods: list[dict[str, Any]]) -> None:
        nonlocal body
        t0, c0 = time.perf_counter(), time.process_time()
        status = compute_status(the_spec, jobset, pods, None, now, memo=memo)
        wall[kind].append(time.perf_counter() - t0)
        cpu[kind].append(time.process_time() - c0)
        body = status_body(status)
        bodies.add(json.dumps(body, sort_keys=True))

    for repeat in range(repeats):
        memo = StatusMemo()
        timed("cold", memo, json.loads(text))
        # A different rank's result arrives at each repeat; its part is the one reduced again.
        compute_status(
            the_spec, jobset, _running(json.loads(text), repeat * 997 % ranks), None, now, memo=memo
        )
        timed("one new", memo, json.loads(text))
        timed("unchanged", memo, json.loads(text))
    size = len(json.dumps(body).encode())
    kept = _kept_per_rank(text, the_spec, ranks)
    target = statistics.median(wall["one new"])
    # CPU seconds beside wall seconds: on a shared machine the wall clock counts other programs.
    print(
        f"status aggregation, {ranks:>7,} ranks, {repeats} repeats: "
        f"{'OK' if target < AGGREGATION_TARGET_SECONDS else 'MISSED'} (one new result); "
        f"status {size / 1024:.1f} KiB {'OK' if size < STATUS_TARGET_BYTES else 'MISSED'}, "
        f"the same in every reconcile: {len(bodies) == 1}; "
        f"phase {body['phase']}, ranks {body['ranksSummary']}; "
        f"the memo keeps {kept / 1024:.1f} KiB a rank"
    )
    for kind in wall:
        w, c = wall[kind], cpu[kind]
        print(
            f"    {kind:>9}: median {statistics.median(w) * 1000:8.1f} ms "
            f"(best {min(w) * 1000:.1f}, worst {max(w) * 1000:.1f}), CPU median "
            f"{statistics.median(c) * 1000:.1f} ms, {statistics.median(c) / ranks * 1e6:.1f} µs "
            "a rank"
        )


def bench_render(repeats: int) -> None:
    the_spec = CheckpointBenchmarkSpec(world_size=64, checkpoint_path="gs://bucket/bench")
    defaults = rendering.RenderDefaults(image="registry.example/ckptbench:1")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        rendering.render_jobset("bench", "default", "0000-uid", the_spec, defaults)
        times.append(time.perf_counter() - t0)
    print(f"render_jobset: median {statistics.median(times) * 1e6:.0f} µs over {repeats} renders")


def bench_reconcile(creations: int) -> None:
    with running_emulator() as emulator, tempfile.TemporaryDirectory() as tmp:
        operator = Operator(
            write_kubeconfig(Path(tmp) / "kubeconfig", emulator.url), Path(tmp) / "operator.log"
        )
        client = Client(emulator.url)
        operator.start()
        try:
            latencies = []
            for i in range(creations):
                name = f"latency-{i}"
                body = {
                    "apiVersion": spec_names.API_VERSION,
                    "kind": spec_names.KIND,
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {
                        "worldSize": 4,
                        "layerSize": 10,
                        "checkpointPath": "gs://bucket/bench",
                    },
                }
                t0 = time.perf_counter()
                client.create(spec_names.API_VERSION, spec_names.PLURAL, body)
                wait_for(
                    "the JobSet",
                    lambda n=name: client.get(  # type: ignore[misc]
                        render_labels.JOBSET_API_VERSION, "jobsets", "default", n
                    ),
                    deadline=30,
                )
                latencies.append(time.perf_counter() - t0)
        finally:
            operator.stop()
    print(
        f"reconcile latency create -> JobSet exists (kmock, {creations} creations): median "
        f"{statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
    )


# ---- the whole reconcile: list against index --------------------------------------------------
# The whole reconcile of a running benchmark, one pod changed since the last: the pods read by a
# list call (before) or from the operator's watch-fed index (after), timed interleaved.
#
# Each reconcile is :func:`~ckptbench.operator.runtime.reconcile.reconcile_once` as the operator
# runs it: the benchmark and its JobSet read, the pods read, the status computed with the
# benchmark's memo, compared and patched. The API's reads of the benchmark and the JobSet are
# in-memory stand-ins (one object each, the same in both arms); what differs is the pod read:
#
# - ``list``: the list response's JSON text (every pod, as the API server sends it: metadata,
#   the pod spec the operator renders, status with the termination message) decoded and filtered
#   by :meth:`Kube.list_pods`' own code; the transfer from the API server is not counted, so the
#   list arm is a lower bound (a real server also sends defaulted fields and managedFields);
# - ``index``: the changed pod's watch event decoded and put in the index as the operator's kopf
#   index does (:func:`~ckptbench.operator.status.pods.kept`), then the reconcile reads the index.
#
# The spec model caps worldSize at 10,000; above it the spec is the same spec with its world size
# raised, built without validation, as the status code reads only its fields.

NS, NAME, UID = "default", "bench", "0000-uid"
LAYER = 100_000
WHOLE_DEFAULTS = RenderDefaults(image="registry.example/ckptbench:1")


def the_spec(ranks: int) -> CheckpointBenchmarkSpec:
    small = min(ranks, MAX_WORLD_SIZE)
    spec = CheckpointBenchmarkSpec.model_validate(
        {
            "worldSize": small,
            "layerSize": LAYER,
            "paddingSize": small,
            "checkpointPath": "gs://bucket/x",
        }
    )
    if ranks == small:
        return spec
    return spec.model_copy(update={"world_size": ranks, "padding_size": ranks})


class Api:
    """The benchmark and its JobSet in memory; pods from ``pods``; the status patched kept."""

    def __init__(self, spec: CheckpointBenchmarkSpec, list_text: bytes) -> None:
        jobset = rendered(spec)
        jobset["metadata"]["annotations"][rec.RENDERED_SPEC_ANNOTATION] = canonical_json(spec)
        self.jobset = jobset
        self.status: dict[str, Any] = {}
        self.list_text = list_text
        self.patches = 0
        self._pod_list = kube.Kube.__new__(kube.Kube)
        self._pod_list._core = self  # type: ignore[assignment]

    # The core API's list call, as the client returns it unparsed (_preload_content=False).
    def list_namespaced_pod(self, namespace: str, **_: Any) -> Any:
        return mock.Mock(data=self.list_text)

    def get_benchmark(self, namespace: str, name: str) -> dict[str, Any] | None:
        meta = {"name": name, "namespace": namespace, "uid": UID, "generation": 1}
        return {"metadata": meta, "spec": {}, "status": self.status}

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.jobset

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        raise AssertionError("the JobSet exists")

    def list_pods(self, namespace: str, benchmark: str) -> list[dict[str, Any]]:
        return self._pod_list.list_pods(namespace, benchmark)

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.patches += 1
        self.status = {k: v for k, v in {**self.status, **patch}.items() if v is not None}

    def post_event(self, *args: Any) -> None:
        pass

    def list_benchmarks(self, namespace: str | None) -> list[tuple[str, str]]:
        return [(NS, NAME)]


def rendered(spec: CheckpointBenchmarkSpec) -> dict[str, Any]:
    """The JobSet of ``spec``; above the cap, of the capped spec (the same objects, but for the
    numbers in the workers' environment)."""
    capped = the_spec(min(spec.world_size, MAX_WORLD_SIZE))
    return render_jobset(
        NAME, NS, UID, capped if spec.world_size > MAX_WORLD_SIZE else spec, WHOLE_DEFAULTS
    )


def pods_of(spec: CheckpointBenchmarkSpec, samples: int) -> list[dict[str, Any]]:
    """Every rank's pod as the API server lists it: with the pod spec the operator renders."""
    jobset = rendered(spec)
    pod_spec = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    shard = sizes.shard_bytes(0, spec.world_size, LAYER, spec.world_size)
    pods = []
    for rank in range(spec.world_size):
        message = rank_pods.rank_result(rank, shard, samples).to_termination_message()
        pod = rank_pods.rank_pod(NAME, rank, message)
        pod["metadata"]["labels"].update(benchmark_labels(NAME))
        pods.append({"apiVersion": "v1", "kind": "Pod", **pod, "spec": pod_spec})
    return rank_pods.listed(pods)


def running(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as it was before its worker finished: no message yet, an older version."""
    meta = dict(pod["metadata"], resourceVersion=str(int(pod["metadata"]["resourceVersion"]) - 1))
    return {**pod, "metadata": meta, "status": {"phase": "Running", "startTime": "x"}}


def listing(pods: list[dict[str, Any]]) -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "PodList", "items": pods}).encode()


def index_bytes_per_rank(text: bytes, ranks: int) -> float:
    """What the pod index holds a rank (tracemalloc), of pods decoded from ``text``: unlike a
    list's pods, which go when the reconcile ends, the index's stay for the benchmark's life."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    decoded = json.loads(text)["items"]
    store = {p["metadata"]["name"]: kept(p) for p in decoded}
    del decoded
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del store
    return held / ranks


def bench_whole_reconcile(ranks: int, repeats: int, samples: int = 8) -> None:
    spec = the_spec(ranks)
    pods = pods_of(spec, samples)
    full = listing(pods)
    patched = mock.patch.object(rec, "parse_spec", lambda raw, policy=None: spec)
    wall: dict[str, list[float]] = {"list": [], "index": []}
    cpu: dict[str, list[float]] = {k: [] for k in wall}
    watch_event: list[float] = []
    statuses: dict[str, set[str]] = {k: set() for k in wall}
    now = datetime.now(UTC)  # one clock for every reconcile: their statuses compare equal
    with patched:
        for repeat in range(repeats):
            changed = repeat * 997 % ranks
            before = [running(p) if i == changed else p for i, p in enumerate(pods)]
            for arm in ("list", "index"):  # A B, A B, ...: both arms see the same load
                api = Api(spec, full)
                memo = StatusMemo()
                store = {p["metadata"]["name"]: kept(p) for p in before}
                index = {(NS, NAME): store.values()}
                # The reconcile before the change, untimed: the memo holds every other rank's
                # result. Read from the index in both arms: the memo keeps the same (pod names,
                # versions, messages) as from a list, and a list would cost minutes at 100,000.
                rec.reconcile_once(
                    api, WHOLE_DEFAULTS, NS, NAME, now, memo, rec.index_reader(index)
                )
                read: Callable[[str, str], Any] | None = (
                    None if arm == "list" else rec.index_reader(index)
                )
                t0, c0 = time.perf_counter(), time.process_time()
                if arm == "index":
                    # The watch event of the changed pod, decoded and indexed as kopf does.
                    event = json.dumps({"type": "MODIFIED", "object": pods[changed]})
                    body = json.loads(event)["object"]
                    store[body["metadata"]["name"]] = kept(body)
                    watch_event.append(time.perf_counter() - t0)
                outcome = rec.reconcile_once(api, WHOLE_DEFAULTS, NS, NAME, now, memo, read)
                wall[arm].append(time.perf_counter() - t0)
                cpu[arm].append(time.process_time() - c0)
                assert outcome is not None and outcome.patched
                statuses[arm].add(json.dumps(status_body(outcome.status), sort_keys=True))
    same = statuses["list"] == statuses["index"] and len(statuses["list"]) == 1
    phase = json.loads(next(iter(statuses["index"])))
    print(
        f"whole reconcile, {ranks:>7,} ranks, one pod changed, {repeats} repeats each arm "
        f"(list {len(full) / 1e6:.0f} MB of JSON): the same status from both: {same}; "
        f"phase {phase['phase']}, ranks {phase['ranksSummary']}"
    )
    for arm in wall:
        w, c = wall[arm], cpu[arm]
        print(
            f"    {arm:>5}: median {statistics.median(w) * 1000:8.1f} ms "
            f"(best {min(w) * 1000:.1f}, worst {max(w) * 1000:.1f}), CPU median "
            f"{statistics.median(c) * 1000:.1f} ms"
        )
    held = index_bytes_per_rank(full, ranks)
    ratio = statistics.median(wall["list"]) / statistics.median(wall["index"])
    print(
        f"    index {ratio:.1f}x faster (medians); the watch event's share of the index arm: "
        f"median {statistics.median(watch_event) * 1e6:.0f} µs; the index holds "
        f"{held / 1024:.1f} KiB a rank ({held * ranks / 2**20:.0f} MiB), for the benchmark's life"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--creations", type=int, default=5)
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--status-only", action="store_true", help="skip render and reconcile")
    only.add_argument(
        "--whole-only", action="store_true", help="only the whole reconcile, list against index"
    )
    args = parser.parse_args()
    for ranks in args.ranks:
        if not args.whole_only:
            bench_status(ranks, args.repeats)
        bench_whole_reconcile(ranks, args.repeats)
    if args.whole_only:
        return 0
    if args.status_only:
        return 0
    bench_render(200)
    bench_reconcile(args.creations)
    return 0


if __name__ == "__main__":
    sys.exit(main())
