"""The storage libraries' known log noise, kept out of a rank's output unless asked for.

Written for gcsfs 2026.10.1 and urllib3 2.8.0: the messages below are theirs, matched by logger and
text. What they say is either expected where it happens or reported by ckptbench itself, so each
one only buries the rank's own lines:

- gcsfs renames a written object with GCS's ``moveTo`` API and falls back to copy and delete
  where it is missing: the emulator has none, so every gcsfs save logged a full traceback
  ("_request non-retriable exception: Metadata in the request couldn't decode, 400") and then
  "Failed to move file using moveTo API ... Falling back to copy/delete". The fallback works;
- urllib3 logs "Retrying (Retry(...)) after connection broken by ..." on each retry of the
  ``google-cloud-storage`` client; ckptbench's own retry layer counts and reports retries
  (:mod:`ckptbench.workload.storage.retry`), and a request that finally fails raises.

Only the log record is dropped: an error still raises where it happens. Each rank counts what it
dropped and says so once at its end (:func:`summary`), naming how to see it all: ``ckptbench run
--verbose``, which sets :data:`VERBOSE_ENV` for the ranks.
"""

from __future__ import annotations

import collections
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ckptbench.workload.contract.names import VERBOSE_LOGS_ENV

VERBOSE_ENV = VERBOSE_LOGS_ENV


@dataclass(frozen=True)
class Noise:
    name: str  # what the summary line calls it
    logger: str  # the logger that emits it (records of its children are not matched)
    pattern: re.Pattern[str]


KNOWN: tuple[Noise, ...] = (
    Noise(
        "gcsfs moveTo fallback",
        "gcsfs",
        re.compile(r"^Failed to move file using moveTo API: .* Falling back to copy/delete\.$"),
    ),
    Noise(
        "gcsfs moveTo refusal (emulator)",
        "gcsfs",
        re.compile(r"non-retriable exception: Metadata in the request couldn't decode, 400$"),
    ),
    Noise("urllib3 retry", "urllib3.connectionpool", re.compile(r"^Retrying \(")),
)


class _Quiet(logging.Filter):
    """Drops the records of :data:`KNOWN` on one logger, counting them by name."""

    def __init__(self, noises: tuple[Noise, ...], counts: collections.Counter[str]) -> None:
        super().__init__()
        self.noises = noises
        self.counts = counts

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        for noise in self.noises:
            if noise.pattern.search(message):
                self.counts[noise.name] += 1
                return False
        return True


class Quieter:
    """The filters installed on each noisy logger, and what they dropped."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self._installed: list[tuple[logging.Logger, _Quiet]] = []

    def install(self) -> Quieter:
        by_logger: dict[str, list[Noise]] = {}
        for noise in KNOWN:
            by_logger.setdefault(noise.logger, []).append(noise)
        for name, noises in by_logger.items():
            logger = logging.getLogger(name)
            quiet = _Quiet(tuple(noises), self.counts)
            logger.addFilter(quiet)
            self._installed.append((logger, quiet))
        return self

    def remove(self) -> None:
        for logger, quiet in self._installed:
            logger.removeFilter(quiet)
        self._installed.clear()

    def summary(self) -> str | None:
        """One line of what was dropped, or None when nothing was."""
        if not self.counts:
            return None
        each = ", ".join(f"{name} x{n}" for name, n in self.counts.items())
        total = sum(self.counts.values())
        return (
            f"{total} known library log message(s) hidden ({each}); "
            "'ckptbench run --verbose' shows them"
        )


def verbose(environ: Mapping[str, str]) -> bool:
    return environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def quiet_unless_verbose(environ: Mapping[str, str]) -> Quieter | None:
    """Installs the filters, unless :data:`VERBOSE_ENV` asks for every message."""
    return None if verbose(environ) else Quieter().install()
