"""What one benchmark's reconciles keep for the next; a status computed with it equals one computed
without it, only sooner.

- The pods' termination messages as read (:class:`~ckptbench.operator.status.pods.ReadMessages`):
  each message is parsed and bounded once, not at every reconcile.
- Each part's reduction (:mod:`ckptbench.workload.contract.results.parts`), with the records it
  was reduced from: a part whose records are the very same objects, in the same order, is not
  reduced again. When one rank's result arrives among 100,000, one part of
  :data:`~ckptbench.workload.contract.results.parts.PART_RANKS` ranks is.
"""

from __future__ import annotations

from collections.abc import Sequence

from ckptbench.operator.status.pods import ReadMessages
from ckptbench.workload.contract.results import parts
from ckptbench.workload.contract.results.figures import summarize_records
from ckptbench.workload.contract.results.parts import Part
from ckptbench.workload.contract.results.records import RankRecord
from ckptbench.workload.contract.results.summaries import RunSummary


class StatusMemo:
    def __init__(self) -> None:
        self.messages = ReadMessages[RankRecord]()
        # By part (its first rank // PART_RANKS): the records reduced and their reduction.
        self._parts: dict[int, tuple[list[RankRecord], Part]] = {}

    def summary(
        self,
        records: Sequence[RankRecord],
        world_size: int,
        total_bytes: int,
        load_world_size: int | None,
    ) -> RunSummary:
        """:func:`summarize_records` of these, each part reduced only when its records changed."""
        return summarize_records(records, world_size, total_bytes, load_world_size, self._part)

    def _part(self, records: Sequence[RankRecord]) -> Part:
        index = records[0].rank // parts.PART_RANKS if records else -1
        kept = self._parts.get(index)
        if kept is not None and _same(kept[0], records):
            return kept[1]
        part = parts.part_of(records)
        # The records are kept with it: alive, their identities cannot be reused by new ones.
        self._parts[index] = (list(records), part)
        return part


def _same(kept: Sequence[RankRecord], records: Sequence[RankRecord]) -> bool:
    """The same record objects in the same order: a record is made once per message read, so the
    same objects mean the same messages."""
    return len(kept) == len(records) and all(a is b for a, b in zip(kept, records, strict=True))
