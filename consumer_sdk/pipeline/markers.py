"""Commits that reach a partition's end past records no reader is handed: transaction
markers (control batches) and, read_committed, the batches of aborted transactions.

A batch's commit is the offset after the last record it holds (on the columns path, after
the last batch decoded with it). A transactional producer writes a COMMIT or ABORT marker
after its records, often in a later fetch than they came in: the client's position moves
past the marker when it reads it, but no batch carries that offset, and the group's
committed offset stays one short of the end, for good (a lag every lag-driven scaler sees).

A partition this member reads with nothing pending, no write in flight holding it, not being
revoked and nothing of it refused by the sink has written everything before its position:
that position is owed as well. The decision is pure (:func:`offsets_past_markers`); the
consumer gathers the positions.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

Partition = TypeVar("Partition", bound=Hashable)


def offsets_past_markers(
    positions: Mapping[Partition, int], known: Callable[[Partition], int | None]
) -> dict[Partition, int]:
    """Of idle partitions' fetch ``positions``, those past the offset this member last
    committed or owes of each (``known``; None: nothing yet): the offsets to owe."""
    owed: dict[Partition, int] = {}
    for partition, position in positions.items():
        last = known(partition)
        if position >= 0 and (last is None or position > last):
            owed[partition] = position
    return owed
