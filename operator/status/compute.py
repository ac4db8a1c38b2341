"""A CheckpointBenchmark's status: a pure function of its spec, its JobSet and its pods.

:func:`compute_status` reads the pods (:mod:`.pods`), aggregates their results with the workload's
own :func:`summarize` (:mod:`.aggregate`, which also bounds the status's size), and derives the
phase, metav1-style conditions (:mod:`.phases`) and a failure reason a person can act on
(:mod:`.failure`).

It and :func:`invalid_spec_status` return the typed :class:`BenchmarkStatus` the CRD's status
schema is generated from. Deterministic: the same inputs give an equal status, so the caller can
skip a patch that changes nothing. ``now`` only stamps a condition whose status changes, or a
completion never seen before. The cost is linear in the number of pods; the one thing it touches
beyond its arguments is the garbage collector, paused while it runs (:func:`_cyclic_gc_paused`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from ckptbench.operator.spec.status_schema import BenchmarkStatus, Both, Resources, Training
from ckptbench.operator.status import conditions as cond
from ckptbench.operator.status.aggregate import (
    LISTED,
    failed_pods,
    operation,
    rank_errors,
    slowest_rank,
)
from ckptbench.operator.status.failure import failure as find_failure
from ckptbench.operator.status.lifecycle import completion_time, kept_time, where
from ckptbench.operator.status.memo import StatusMemo
from ckptbench.operator.status.phases import (
    FAILED,
    FAILED_CONDITION,
    JOBSET_CREATED,
    RunSpec,
    benchmark_conditions,
)
from ckptbench.operator.status.pods import (
    against_spec,
    current_attempt,
    object_name,
    read_pods,
)
from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.choices import Strategy
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results import figures
from ckptbench.workload.contract.results.summaries import RunSummary


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector out of the aggregation. The decoded pods, and on a cold
    reconcile each rank's parsed result and the record made of it, are many container objects,
    none in a cycle: the collector's full passes rescan them again and again and free nothing.
    At 100,000 ranks, when every parsed result stayed alive until the status was built, that was
    8 passes and 7.8 of 13.8 s. Reference counting still frees everything as usual."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _shard_bytes(spec: RunSpec) -> Callable[[int], int] | None:
    """Each saving rank's shard bytes as its config computes them (what an honest rank reports),
    or None when not checked: a RunSpec without settings, or a model preset (sizing a model's
    rank walks every tensor, too slow per rank at 100,000 ranks)."""
    make = getattr(spec, "to_workload_config", None)
    if not callable(make) or getattr(spec, "model", None) is not None:
        return None
    base: WorkloadConfig = make(run_id="status", master_addr="status")
    if base.strategy is Strategy.REPLICATED:  # every saving rank holds the same
        same = base.model_copy(update={"rank": 0}).shard_bytes
        return lambda rank: same
    # The config's own formula for the dealt layout, without a config per rank.
    return lambda rank: sizes.shard_bytes(rank, base.world_size, base.layer_size, base.padding_size)


def _mlperf_rules(spec: RunSpec, summary: RunSummary, reported: int) -> dict[str, Any]:
    """MLPerf's category from the spec's settings, and the 3 x RAM verdict from the ranks."""
    # RunSpec is the little the status needs; the category needs every setting, which only a
    # real spec (CheckpointBenchmarkSpec, BenchmarkSettings' record()) has.
    record = getattr(spec, "record", None)
    found = figures.category_figures(record()) if callable(record) else {}
    out: dict[str, Any] = {
        "mlperf_category": found.get("mlperf_category"),
        "mlperf_open_reasons": found.get("mlperf_open_reasons"),
    }
    if reported and summary.ram_rule is not None:
        out["ram_rule"] = summary.ram_rule
    return out


@_cyclic_gc_paused()
def compute_status(
    spec: RunSpec,
    jobset: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    previous: Mapping[str, Any] | None,
    now: datetime,
    *,
    generation: int | None = None,
    spec_change: str | None = None,
    foreign_jobset: str | None = None,
    memo: StatusMemo | None = None,
) -> BenchmarkStatus:
    """The status for ``spec`` given its JobSet (None: not created yet) and the JobSet's pods.

    ``spec`` is the spec the JobSet was rendered from. ``spec_change`` describes an edit made
    after the run started, which is refused: it becomes the SpecChangeRejected condition.
    ``foreign_jobset`` says why a JobSet of the benchmark's name, which it does not own, was not
    adopted: the benchmark waits until it is gone. ``memo`` is what the last call for this
    benchmark kept (:class:`StatusMemo`): the status is the same with or without it.
    """
    previous = previous or {}
    total = spec.total_bytes
    memo = memo if memo is not None else StatusMemo()
    reports = against_spec(
        read_pods(current_attempt(pods), memo.messages), spec.world_size, _shard_bytes(spec)
    )
    summary = memo.summary(reports.results, spec.world_size, total, spec.load_world_size)
    slowest = slowest_rank(reports.results)
    failure = find_failure(spec, summary, reports, jobset)
    at = where(
        jobset,
        foreign_jobset,
        failure,
        summary.succeeded,
        summary.ranks_reported,
        spec.rank_count,
        reports.running,
        reports.pending_reason,
        spec.queue_name,
    )
    phase, reason, message = at.phase, at.reason, at.message
    completion = completion_time(phase, previous, reports.finished, jobset, now)
    reported = summary.ranks_reported
    return BenchmarkStatus(
        phase=phase,
        reason=reason,
        message=message,
        failure_reason=message if phase == FAILED else None,
        observed_generation=generation,
        job_set_name=object_name(jobset) if jobset is not None else None,
        ranks_expected=spec.rank_count,
        ranks_reported=reported,
        ranks_summary=f"{reported}/{spec.rank_count}",
        missing_rank_count=summary.missing_rank_count or None,
        missing_ranks=summary.missing_ranks or None,  # the summary lists the first 20
        checkpoint_bytes=total,
        checkpoint_size=sizes.format_bytes(total),
        save=operation(summary.save, reports.result_pods) if summary.save else None,
        load=operation(summary.load, reports.result_pods) if summary.load else None,
        delete=operation(summary.delete, reports.result_pods) if summary.delete else None,
        slowest_rank=slowest,
        resources=(
            Resources.model_validate(summary.resources.model_dump()) if summary.resources else None
        ),
        train=Training.of(summary.train) if summary.train is not None else None,
        both=Both.model_validate(dict(summary.both)) if summary.both is not None else None,
        checkpointer_peak_rss_bytes=summary.checkpointer_peak_rss_bytes,
        verified=summary.verified,
        procedure=summary.procedure.value if reported else None,
        cache=summary.cache.value if reported and summary.cache is not None else None,
        mlperf=summary.mlperf or None,  # a fixed set of MLPerf Storage's names
        **_mlperf_rules(spec, summary, reported),
        rank_error_count=summary.error_count or None,
        rank_errors=rank_errors(summary, reports) or None,
        failed_pod_count=len(reports.failures) or None,
        failed_pods=failed_pods(reports) or None,
        unreadable_result_count=len(reports.unreadable) or None,
        unreadable_results=reports.unreadable[:LISTED] or None,
        start_time=kept_time(previous, "startTime") or reports.started,
        completion_time=completion,
        conditions=benchmark_conditions(
            spec,
            jobset,
            phase,
            reason,
            message,
            at.suspended,
            previous,
            now,
            generation,
            spec_change,
        ),
    )


def invalid_spec_status(
    message: str,
    previous: Mapping[str, Any] | None,
    now: datetime,
    *,
    generation: int | None = None,
) -> BenchmarkStatus:
    """Status of a benchmark whose spec the operator cannot run: no JobSet is created."""
    previous = previous or {}
    desired = [
        cond.make_condition(
            JOBSET_CREATED,
            "False",
            "InvalidSpec",
            "no JobSet: the spec is invalid",
            now,
            generation,
        ),
        cond.make_condition(FAILED_CONDITION, "True", "InvalidSpec", message, now, generation),
    ]
    return BenchmarkStatus(
        phase=FAILED,
        reason="InvalidSpec",
        message=message,
        failure_reason=message,
        observed_generation=generation,
        conditions=cond.merge_conditions(previous.get("conditions"), desired),
    )


def describe_spec_change(ran: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """Which top-level spec fields differ between what ran and what is asked now; None if none."""
    changed = sorted(k for k in set(ran) | set(current) if ran.get(k) != current.get(k))
    if not changed:
        return None
    return (
        f"spec fields changed after the run started: {', '.join(changed)}; the running JobSet "
        "keeps the spec it started with. Delete and re-create the benchmark to run the new spec."
    )
