"""What a best-effort deletion reports, whatever the storage: one type for every backend."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class DeleteOutcome:
    """What a best-effort deletion removed, and what it could not (names relative to the URL)."""

    deleted: int = 0
    failed: list[str] = dataclasses.field(default_factory=list)
    first_error: str | None = None

    def note(self, name: str, exc: BaseException) -> None:
        self.failed.append(name)
        if self.first_error is None:
            self.first_error = f"{type(exc).__name__}: {exc}"
