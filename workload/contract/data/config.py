"""What one data-loading rank needs to know: the benchmark's settings (``settings.py``) and where
this rank runs, read from ``CKPTBENCH_*`` variables as the checkpoint rank reads its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import ConfigDict, Field, model_validator

from ckptbench.workload.contract import environment
from ckptbench.workload.contract.data import layout
from ckptbench.workload.contract.data.choices import Reader
from ckptbench.workload.contract.data.settings import DATA_RULES, DataSettings
from ckptbench.workload.contract.names import COMPLETION_INDEX_ENV

ALIASES: dict[str, tuple[str, ...]] = {
    "rank": ("RANK", COMPLETION_INDEX_ENV),
    "world_size": ("WORLD_SIZE",),
    "master_addr": ("MASTER_ADDR",),
    "master_port": ("MASTER_PORT",),
}


class DataConfig(DataSettings):
    """The data-loading benchmark's settings, and where this rank runs."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)

    rank: int = Field(0, ge=0, description="This process's rank (per pod; not rendered).")
    run_id: str = Field(
        "run",
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Folder under dataPath for this run's results.",
    )
    memory_limit_bytes: int | None = Field(
        None, ge=1, description="Memory one rank may use; empty: the container's cgroup limit."
    )
    master_addr: str = Field("127.0.0.1", min_length=1, description="Rank 0's host name.")
    master_port: int = Field(29500, ge=1, le=65535, description="Rank 0's rendezvous port.")
    collective_timeout_seconds: float = Field(
        1800.0, gt=0, le=86_400, description="How long a rank waits for the others at a barrier."
    )
    heartbeat_file: str | None = Field(
        None, description="A file the rank touches every few seconds while it lives; empty: none."
    )
    termination_log: str | None = Field(
        "/dev/termination-log",
        description="Where the compact result goes (Kubernetes termination message); empty: none.",
    )

    @model_validator(mode="after")
    def _check_consistency(self) -> Self:
        if self.rank >= self.world_size:
            raise ValueError(f"rank: {self.rank} must be below world_size {self.world_size}")
        for rule in DATA_RULES:
            if not rule.check(self):
                raise rule.broken(self)
        scheme, sep, rest = self.data_path.partition("://")
        if self.backend is Reader.FILE:
            if sep and scheme != "file":
                raise ValueError(
                    f"data_path: reader file takes an absolute path or file:///path, not a "
                    f"{scheme}:// URL (got {self.data_path!r})"
                )
        elif not self.data_path.startswith(self.backend.scheme):
            raise ValueError(
                f"data_path: reader {self.backend.value} takes a {self.backend.scheme} URL "
                f"(got {self.data_path!r})"
            )
        elif not rest.split("/")[0]:
            raise ValueError(f"data_path: no bucket in {self.data_path!r}")
        return self

    @property
    def rank_count(self) -> int:
        """Ranks in the run: every rank reads."""
        return self.world_size

    # -- where things are ------------------------------------------------------------------------

    @property
    def dataset(self) -> layout.Dataset:
        return layout.Dataset(
            root=self.data_path.removeprefix("file://").rstrip("/"),
            format=self.resolved_format,
            files=self.resolved_files,
            samples_per_file=self.resolved_samples_per_file,
            sample_bytes=self.resolved_sample_bytes,
            seed=self.seed,
        )

    @property
    def results_path(self) -> str:
        return f"{self.data_path.removeprefix('file://').rstrip('/')}/{self.run_id}/results"

    # -- environment round trip ------------------------------------------------------------------

    def to_env(self) -> dict[str, str]:
        """The pod environment for this config; each pod gets its own rank."""
        return environment.to_env(self, {"rank"})

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> DataConfig:
        return environment.from_env(cls, environ, ALIASES, overrides)
