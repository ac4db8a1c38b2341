"""Where a dataset's objects live and what its manifest says: pure names and sizes.

A dataset is named for what makes its bytes (format, files, samples per file, sample size, seed),
so every run that asks for the same one finds it, whatever preset or reader asked:
``<dataPath>/datasets/<name>/manifest.json`` beside ``data/part-<index>.<ext>``. ``ckptbench
clean`` removes a dataset by its manifest (the names it implies), never by listing its prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from ckptbench.workload.contract.data.choices import DataFormat

MANIFEST_VERSION = 1
# Every sample's first bytes (raw and npz): magic, index (u64), crc32c of the rest (u32).
HEADER_BYTES = 16
MAGIC = b"CKBD"


@dataclass(frozen=True)
class Dataset:
    root: str  # the data path, no trailing slash and no file:// (a local path or a URL)
    format: DataFormat
    files: int
    samples_per_file: int
    sample_bytes: int
    seed: int

    @property
    def name(self) -> str:
        return (
            f"{self.format.value}-{self.files}x{self.samples_per_file}x{self.sample_bytes}"
            f"-seed{self.seed}"
        )

    @property
    def path(self) -> str:
        return f"{self.root}/datasets/{self.name}"

    @property
    def data_prefix(self) -> str:
        """Where the sample files are: what a library dataset lists."""
        return f"{self.path}/data/"

    @property
    def manifest_path(self) -> str:
        return f"{self.path}/manifest.json"

    def file_name(self, index: int) -> str:
        """File ``index``'s name under :attr:`data_prefix`: zero-padded, so every listing sorts
        them by index."""
        return f"part-{index:09d}.{self.format.extension}"

    def file_path(self, index: int) -> str:
        return self.data_prefix + self.file_name(index)

    def file_index(self, name: str) -> int:
        """The index of a file named as :meth:`file_name` names it (a path's last part)."""
        stem = name.rsplit("/", 1)[-1].removeprefix("part-").split(".", 1)[0]
        return int(stem)

    @property
    def total_samples(self) -> int:
        return self.files * self.samples_per_file

    def identity(self) -> dict[str, object]:
        return {
            "format": self.format.value,
            "files": self.files,
            "samples_per_file": self.samples_per_file,
            "sample_bytes": self.sample_bytes,
            "seed": self.seed,
        }


class Manifest(BaseModel):
    """What a prepared dataset is: written last, so a dataset with a manifest is whole."""

    model_config = ConfigDict(extra="forbid")

    version: int = MANIFEST_VERSION
    format: DataFormat
    files: int = Field(ge=1)
    samples_per_file: int = Field(ge=1)
    sample_bytes: int = Field(ge=1)
    seed: int = Field(ge=0)
    stored_bytes: int = Field(ge=0, description="Bytes of every file as stored.")
    prepare_seconds: float = Field(ge=0, description="How long the ranks took to write it.")

    def matches(self, dataset: Dataset) -> bool:
        mine = self.model_dump(mode="json", include=set(dataset.identity()))
        return self.version == MANIFEST_VERSION and mine == dataset.identity()
