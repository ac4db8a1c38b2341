"""The workload configuration: one pydantic model, read from ``CKPTBENCH_*`` variables.

Its settings, and the rules that span them, are declared in
:mod:`~ckptbench.workload.contract.settings`; this module adds where a rank runs, runs those rules
(and the few that are the rank's alone), and makes the environment round trip. The operator renders
a :class:`WorkloadConfig` into a pod's environment with :meth:`to_env`; the pod parses it back
with :meth:`WorkloadConfig.from_env`. The reference benchmark's own variable names
(``WORLD_SIZE``, ``LAYER_SIZE``, ...) are accepted as aliases so its job files run unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import ConfigDict, Field, model_validator

from ckptbench.workload.contract import environment
from ckptbench.workload.contract.checkpoint import memory_plan, models, sizes
from ckptbench.workload.contract.choices import Backend, CacheMode, Strategy
from ckptbench.workload.contract.environment import (
    ENV_PREFIX,
    ConfigError,
    FieldError,
    field_errors,
)
from ckptbench.workload.contract.names import (
    CHECKPOINTER_LOG_ENV,
    COMPLETION_INDEX_ENV,
    VERBOSE_LOGS_ENV,
)
from ckptbench.workload.contract.settings import SETTINGS_RULES, BenchmarkSettings

__all__ = ["ENV_PREFIX", "ConfigError", "FieldError", "WorkloadConfig", "field_errors"]


class WorkloadConfig(BenchmarkSettings):
    """Everything one rank needs to know: the benchmark's settings (declared once, in
    :mod:`~ckptbench.workload.contract.settings`) and where this rank runs. Rank is per pod;
    everything else is the same for all."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)

    rank: int = Field(0, ge=0, description="This process's rank (per pod; not rendered).")
    run_id: str = Field(
        "run",
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Folder under checkpoint_path for this run's checkpoints and results.",
    )
    memory_limit_bytes: int | None = Field(
        None,
        ge=1,
        description="Memory one rank may use; empty: the container's cgroup limit.",
    )
    master_addr: str = Field(
        "127.0.0.1",
        min_length=1,
        max_length=253,
        # A host name or an IP address: a space (a typo) would wait out the rendezvous deadline.
        pattern=r"^[A-Za-z0-9._:\[\]-]+$",
        description="Rank 0's host name or IP address.",
    )
    master_port: int = Field(29500, ge=1, le=65535, description="Rank 0's rendezvous port.")
    collective_timeout_seconds: float = Field(
        1800.0, gt=0, le=86_400, description="gloo timeout for one collective."
    )
    heartbeat_file: str | None = Field(
        None,
        description="A file the rank touches every few seconds while it lives (the local runner "
        "watches it); empty: none.",
    )
    termination_log: str | None = Field(
        "/dev/termination-log",
        description="Where the compact result goes (Kubernetes termination message); empty: none.",
    )
    result_file: str | None = Field(
        None,
        description="Where the full result goes too, every sample kept (the local runner reads "
        "it: past 4 KiB the termination message drops the samples); empty: none.",
    )

    @model_validator(mode="after")
    def _check_consistency(self) -> Self:
        if self.rank >= self.rank_count:
            # Above world_size only on a restore onto more ranks: those ranks load, never save.
            raise ValueError(f"rank: {self.rank} must be below {self._ranks_named()}")
        # The rules on the settings, the same the CRD carries as CEL (settings.SETTINGS_RULES).
        for rule in SETTINGS_RULES:
            if not rule.check(self):
                raise rule.broken(self)
        spec = self.model_spec
        if spec is not None:
            # A config path must be readable, of a family whose shapes are computed (ModelError).
            models.model_parameters(spec)
        # The rank's own: what a path must hold beyond its backend's scheme.
        url_scheme, sep, _ = self.checkpoint_path.partition("://")
        if self.backend is Backend.FILE and sep and url_scheme != "file":
            # Each backend names the schemes it takes; a foreign URL would otherwise become a
            # relative folder (``./s3:/b/x``) under the working directory.
            raise ValueError(
                f"checkpoint_path: backend file takes an absolute path or file:///path, not a "
                f"{url_scheme}:// URL (got {self.checkpoint_path!r})"
            )
        scheme = self.backend.scheme
        if scheme and not self.checkpoint_path[len(scheme) :].split("/")[0]:
            raise ValueError(f"checkpoint_path: no bucket in {self.checkpoint_path!r}")
        return self

    @property
    def load_rank(self) -> int:
        """The rank whose shard this rank loads: its own, or ``load_shard_offset`` ranks on."""
        if self.load_shard_offset is None:
            return self.rank  # past world_size too, on a rank a restore onto more ranks added
        return (self.rank + self.load_shard_offset) % self.world_size

    def loader(self) -> WorkloadConfig:
        """This config as the rank whose shard this rank loads: its template and checks."""
        if self.load_rank == self.rank:
            return self
        return self.model_copy(update={"rank": self.load_rank})

    @property
    def cache_mode(self) -> CacheMode | None:
        if self.backend is not Backend.FILE:
            return None
        return CacheMode.DROPPED if self.drop_cache else CacheMode.KEPT

    # -- derived facts -----------------------------------------------------------------------

    @property
    def even_shards(self) -> bool:
        spec = self.model_spec
        if spec is not None:
            return all(
                t.shape[0] % self.world_size == 0
                for t in models.iter_sharded(models.state_tensors(spec))
            )
        return self.padding_size % self.world_size == 0

    def _ranks_named(self) -> str:
        if self.rank_count == self.world_size:
            return f"world_size {self.world_size}"
        return f"load_world_size {self.rank_count}"

    @property
    def saves(self) -> bool:
        """Whether this rank saves: all do but the ranks a restore onto more ranks adds."""
        return self.rank < self.world_size

    @property
    def shard_bytes(self) -> int:
        """Tensor bytes this rank writes when it saves (0 on a rank that only loads).

        Replicated, every rank holds the whole state, but DCP's planner keeps each tensor in the
        plan of one rank only: the one with the least planned so far, ties to the lower rank.
        The reference layout's tensors are all one size, so that deals them round-robin, and a
        rank writes the sharded layout's shard (tests/test_strategies.py reads what each rank
        wrote from the checkpoint's metadata). Full, rank 0 writes the whole state gathered to
        it and the other ranks write nothing."""
        if not self.saves:
            return 0
        if self.strategy is Strategy.FULL:
            return sizes.total_bytes(self.layer_size, self.padding_size) if self.rank == 0 else 0
        spec = self.model_spec
        if spec is not None:
            return models.rank_bytes(models.state_tensors(spec), self.world_size, self.rank)
        return sizes.shard_bytes(self.rank, self.world_size, self.layer_size, self.padding_size)

    def whole(self) -> WorkloadConfig:
        """This config as a rank holding the whole state (the full strategy's rank 0 on load)."""
        return self.model_copy(update={"strategy": Strategy.REPLICATED})

    def held_indices(self) -> range:
        """The reference layout's tensors this rank holds: its own, or all when replicated."""
        if self.strategy is Strategy.REPLICATED:
            return range(self.padding_size)
        return sizes.owned_indices(self.rank, self.world_size, self.padding_size)

    def memory_estimate(self) -> memory_plan.MemoryEstimate:
        """Rank 0's peak (the largest rank under either layout's dealing), on this backend."""
        return memory_plan.estimate(memory_plan.rank_load(self))

    def describe_ranks(self, noun: str = "rank(s)") -> str:
        """``N rank(s)``, and the ranks that load when a reshard changes their number."""
        text = f"{self.world_size} {noun}"
        if self.load_world_size not in (None, self.world_size):
            text += f", loading on {self.load_world_size}"
        return text

    def describe_state(self) -> str:
        spec = self.model_spec
        if spec is not None:
            return spec.describe()
        return (
            f"reference layout, {self.padding_size} x ({self.layer_size}, {sizes.COLUMNS}) float32"
        )

    @property
    def run_path(self) -> str:
        """Where this run's checkpoints and results live (no trailing slash)."""
        base = self.checkpoint_path.removeprefix("file://").rstrip("/")
        return f"{base}/{self.run_id}"

    def checkpoint_id(self, sample: int) -> str:
        """A fresh checkpoint id per sample: GCS rate-limits repeated writes to one object name."""
        return f"{self.run_path}/checkpoints/ckpt_{sample}.ckpt"

    @property
    def results_path(self) -> str:
        return f"{self.run_path}/results"

    # -- environment round trip ---------------------------------------------------------------

    def to_env(self) -> dict[str, str]:
        """The pod environment for this config. Rank is left out: each pod gets its own index."""
        # A model preset excludes the reference layout's settings: rendering them would make
        # the round trip fail on exclusivity.
        skip = {"rank", "layer_size", "padding_size"} if self.model is not None else {"rank"}
        return environment.to_env(self, skip)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> WorkloadConfig:
        """Parse the environment; a bad value raises :class:`ConfigError` naming its variable."""
        return environment.from_env(
            cls, environ, ALIASES, overrides, convert={"USE_FSSPEC": _parse_use_fsspec}
        )


# The reference's names come after ours, so ours win when both are set.
ALIASES: dict[str, tuple[str, ...]] = {
    "world_size": ("WORLD_SIZE",),
    "rank": ("RANK", COMPLETION_INDEX_ENV),
    "layer_size": ("LAYER_SIZE",),
    "padding_size": ("PADDING_SIZE",),
    "sample_count": ("SAMPLE_COUNT",),
    "checkpoint_path": ("CKPT_DIR_PATH",),
    "project": ("PROJECT",),
    "backend": ("USE_FSSPEC",),
    "master_addr": ("MASTER_ADDR",),
    "master_port": ("MASTER_PORT",),
}


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """``CKPTBENCH_*`` variables that name no setting: most likely a misspelt one."""
    return environment.unknown_variables(environ, WorkloadConfig, is_rank_variable)


def is_rank_variable(var: str) -> bool:
    """A variable with the prefix that a rank reads though it names no setting (the operator's
    own settings share the prefix, and a shell that runs both may carry them)."""
    return var in RANK_VARIABLES or var.startswith(_OPERATOR_PREFIXES)


# Read by a rank but no setting of the benchmark.
RANK_VARIABLES = frozenset({VERBOSE_LOGS_ENV, CHECKPOINTER_LOG_ENV})


# The operator's own settings share the prefix; a shell that runs both may carry them.
_OPERATOR_PREFIXES = (ENV_PREFIX + "OPERATOR_", ENV_PREFIX + "DEFAULT_IMAGE")


def _parse_use_fsspec(value: str) -> str:
    flag = value.strip().lower()
    if flag in ("1", "true", "yes", "on"):
        return Backend.GCSFS.value
    if flag in ("0", "false", "no", "off", ""):
        return Backend.GCS.value
    raise ConfigError(f"invalid configuration: USE_FSSPEC (backend): not a boolean (got {value!r})")
