"""The DataLoadingBenchmark's own cross-field rules (:data:`RULES_OF_THE_CR`): what only a cluster
has to say about the dataset's path, the ranks and the credentials, then the pods' (the
CheckpointBenchmark's :data:`~ckptbench.operator.spec.pod_rules.POD_RULES`). Each is a
:class:`~ckptbench.workload.contract.rule.Rule`: the CEL the API server runs and its Python twin,
which the operator and ``ckptbench render`` run. The rules on the data settings themselves are
declared beside them (``contract/data/settings.py``: ``DATA_RULES``, which the rank runs too).
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from ckptbench.operator.spec.names import REPLICATED_JOB
from ckptbench.operator.spec.pod_rules import POD_RULES
from ckptbench.operator.spec.rule import PodFields
from ckptbench.operator.spec.rules import BACKSTEP, under_a_mount
from ckptbench.workload.contract.checkpoint import memory_plan
from ckptbench.workload.contract.data import memory
from ckptbench.workload.contract.data.choices import Reader
from ckptbench.workload.contract.data.settings import DataSettings
from ckptbench.workload.contract.rule import Rule
from ckptbench.workload.contract.state_settings import MAX_WORLD_SIZE


class Spec(PodFields, Protocol):
    """What these rules read of a DataLoadingBenchmark spec (its model runs them, so this module
    names the fields rather than importing it)."""

    @property
    def backend(self) -> Reader: ...
    @property
    def data_path(self) -> str: ...
    @property
    def world_size(self) -> int: ...
    @property
    def s3_credentials_secret(self) -> str | None: ...
    @property
    def resources(self) -> dict[str, Any] | None: ...


# The reader as a rank resolves it (the CRD's default fills it in; a spec read by the operator
# without an API server may leave it out).
_READER = f"(has(self.backend) ? self.backend : '{Reader.GCS.value}')"


def _cel_list(items: list[str]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


def _readers_of(scheme: str) -> list[str]:
    return [reader.value for reader in Reader if reader.scheme == scheme]


def _scheme_cel() -> str:
    """CEL of "dataPath takes its reader's scheme", from the readers' own table (Reader.scheme)."""
    text = "self.dataPath.startsWith('/')"  # the local path of reader file
    for scheme in sorted({reader.scheme for reader in Reader} - {""}):
        text = (
            f"({_READER} in {_cel_list(_readers_of(scheme))} ? "
            f"self.dataPath.startsWith('{scheme}') : {text})"
        )
    return text


def _takes_its_scheme(spec: Spec) -> bool:
    scheme = spec.backend.scheme
    return spec.data_path.startswith(scheme or "/")


_NOT_FILE = f"{_READER} != '{Reader.FILE.value}'"
_S3_READERS = [Reader.S3.value, Reader.S3FS.value]

RULES_OF_THE_CR: tuple[Rule[Spec], ...] = (
    # A rank's pod is <name>-rank-0-<index>: the index must keep the hostname a DNS label, which
    # the data settings' own bound (made for local runs and sweeps) does not.
    Rule(
        "world_size",
        f"!has(self.worldSize) || self.worldSize <= {MAX_WORLD_SIZE}",
        f"must be at most {MAX_WORLD_SIZE} in a cluster: each rank's pod hostname "
        f"<name>-{REPLICATED_JOB}-0-<index> must stay a DNS label",
        lambda s: s.world_size <= MAX_WORLD_SIZE,
    ),
    Rule(
        "data_path",
        _scheme_cel(),
        "must be a gs:// URL for {backend} dataflux, gcs and gcsfs, an s3:// URL for s3 and "
        "s3fs, and an absolute path for file (file:// URLs are for local runs)",
        _takes_its_scheme,
    ),
    # Before the rule that the path lie under a mount, which compares the path as written (the
    # CheckpointBenchmark's checkpointPath rules say why).
    Rule(
        "data_path",
        f"{_NOT_FILE} || !self.dataPath.matches('{BACKSTEP}')",
        "must not contain a '..' segment for {backend} file: the path must name the place it "
        "reaches, so the rule that it lie under a volume mount holds",
        lambda s: s.backend is not Reader.FILE or not re.search(BACKSTEP, s.data_path),
    ),
    Rule(
        "data_path",
        f"{_NOT_FILE} || !has(self.worldSize) || self.worldSize == 1 || "
        "(has(self.volumeMounts) && self.volumeMounts.exists(m, self.dataPath == m.mountPath || "
        "self.dataPath.startsWith(m.mountPath.endsWith('/') ? m.mountPath : "
        "m.mountPath + '/')))",
        "must lie under one of {volume_mounts} for {backend} file with more than one rank "
        "({world_size} > 1): every rank reads the one dataset rank 0 makes, so they need a "
        "shared volume",
        lambda s: (
            s.backend is not Reader.FILE
            or s.world_size == 1
            or under_a_mount(s.data_path, s.volume_mounts)
        ),
    ),
    Rule(
        "s3_credentials_secret",
        f"!has(self.s3CredentialsSecret) || {_READER} in {_cel_list(_S3_READERS)}",
        "is for {backend} s3 and s3fs",
        lambda s: s.s3_credentials_secret is None or s.backend in (Reader.S3, Reader.S3FS),
    ),
    *POD_RULES,
)


def planned_bytes(settings: DataSettings) -> int:
    """A rank's planned peak (``contract/data/memory.py``), the one figure the spec's check and the
    rendered memory limit both read."""
    return memory.estimate(settings).total_bytes


def memory_problem(spec: Spec, settings: DataSettings) -> str | None:
    """``resources.limits.memory`` below a rank's planned peak, or None (no limit given).

    Python only: the plan's arithmetic over the preset's table is more than CEL should carry.
    """
    quantity = ((spec.resources or {}).get("limits") or {}).get("memory")
    if quantity is None:
        return None
    try:
        limit = memory_plan.parse_quantity(str(quantity))
    except ValueError as exc:
        return f"resources.limits.memory: {exc}"
    refused = memory.refusal(settings, limit, None)
    if refused is None:
        return None
    # The plan's advice names ckptbench data's options; the spec's fields are these.
    advice = refused.replace("--batch-size", "batchSize").replace("--workers", "numWorkers")
    advice = advice.replace("--prefetch", "prefetchFactor")
    return f"resources.limits.memory: {quantity}: {advice}, or raise the limit"
