"""What a data-loading rank reports: the compact result in its termination message (the operator
reads it from the pod's status; ``ckptbench data`` from a file), bounded whatever the run's size.

Every duration is measured on the rank (docs/data-loading.md#the-procedure); the run's figures are
computed from these by ``figures.py`` alone.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SCHEMA = "ckptbench.data.rank/v1"
MAX_ACCELERATORS = 64


class DataRankResult(BaseModel):
    """One rank's reading of the dataset, summed over its emulated accelerators."""

    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(SCHEMA, alias="schema")
    rank: int = Field(ge=0)
    host: str = Field("", max_length=253)
    error: str | None = Field(None, max_length=1000)
    accelerators: int = Field(0, ge=0, le=MAX_ACCELERATORS)
    samples: int = Field(0, ge=0, description="Samples handed to the accelerators.")
    bytes: int = Field(0, ge=0, description="Sample bytes handed to the accelerators.")
    batches: int = Field(0, ge=0)
    verified_bytes: int = Field(0, ge=0, description="Sample bytes checked against checksums.")
    compute_seconds: float = Field(0.0, ge=0, description="Emulated compute, summed.")
    loop_seconds: float = Field(
        0.0,
        ge=0,
        description="Each accelerator's time from its first batch asked for to its "
        "last batch computed, summed (verification excluded).",
    )
    verify_seconds: float = Field(0.0, ge=0)
    au: list[float] = Field(
        default_factory=list,
        max_length=MAX_ACCELERATORS,
        description="Each accelerator's utilisation: compute / loop seconds.",
    )
    first_batch_seconds: float | None = Field(
        None, ge=0, description="The longest wait for an accelerator's first batch."
    )
    epoch_seconds: list[float] = Field(
        default_factory=list, max_length=1000, description="Each epoch, its slowest accelerator."
    )
    epoch_samples: list[int] = Field(default_factory=list, max_length=1000)
    wait_histogram: list[list[int]] = Field(default_factory=list, max_length=400)
    listing_seconds: float | None = Field(None, ge=0)
    prepare_seconds: float | None = Field(
        None, ge=0, description="This rank's share of writing the dataset; None: it was reused."
    )
    requests: int | None = Field(
        None, ge=0, description="Requests this rank's reads made, where ckptbench issues them."
    )
    retries: dict[str, int] = Field(default_factory=dict, max_length=32)
    worker_peak_rss_bytes: int | None = Field(
        None, ge=0, description="The largest DataLoader worker's peak resident memory."
    )

    @property
    def succeeded(self) -> bool:
        return self.error is None

    def to_message(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_defaults=False)

    @classmethod
    def from_message(cls, text: str) -> DataRankResult:
        return cls.model_validate_json(text)
