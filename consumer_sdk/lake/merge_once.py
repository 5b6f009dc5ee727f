"""Writes that land each (topic, partition, offset) once whoever repeats them: for share-group
members (KIP-932), which read one partition together and get a record again when its
acquisition lock expired or its member died before acknowledging it.

A batch goes in by an insert-only ``MERGE`` on (topic, partition, offset): rows the table holds
are skipped. Two members merging at once cannot both insert a row: Delta records what a
``MERGE`` read and refuses the commit of the second when the first added files where it read
(``ConcurrentAppendException``); the loser retries and then finds the rows. That is why this
is Delta only: Spark turns an insert-only ``MERGE`` into an Iceberg table into a plain append
of the rows it did not find, and an append checks nothing against a concurrent one.

The ``ON`` clause also bounds the target by the batch's offset range per partition, so Delta
reads only the files whose statistics can hold those offsets.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

MERGE_FORMATS = ("delta",)
# Tries of one batch's merge while other members' commits conflict with it; each conflict
# means another member's commit went in, so the group as a whole progresses.
MERGE_ATTEMPTS = 30
# Words in the exception Delta raises when a concurrent commit conflicts with this one.
_CONFLICT_MARKERS = ("Concurrent", "ProtocolChanged", "MetadataChanged")


def merge_statement(
    target: str, source: str, ranges: Mapping[int, tuple[int, int]], *, with_topic: str
) -> str:
    """An insert-only ``MERGE`` of view ``source`` into table ``target`` on (topic, partition,
    offset), the target bounded by ``ranges`` (partition -> first and last offset)."""
    if not ranges:
        raise ValueError("a merge needs the batch's offset ranges")
    bounds = " OR ".join(
        f"(t.`partition` = {int(p)} AND t.`offset` BETWEEN {int(lo)} AND {int(hi)})"
        for p, (lo, hi) in sorted(ranges.items())
    )
    topic = with_topic.replace("\\", "\\\\").replace("'", "\\'")
    return (
        f"MERGE INTO {target} t USING {source} s "
        f"ON t.`topic` = '{topic}' AND ({bounds}) "
        "AND t.`topic` = s.`topic` AND t.`partition` = s.`partition` AND t.`offset` = s.`offset` "
        "WHEN NOT MATCHED THEN INSERT *"
    )


def is_write_conflict(error: BaseException) -> bool:
    """Whether ``error`` is Delta refusing a commit because another one went in first."""
    text = f"{type(error).__name__}: {error}"
    return any(marker in text for marker in _CONFLICT_MARKERS)


def merge_once(
    session: Any,
    target: str,
    frame: Any,
    ranges: Mapping[int, tuple[int, int]],
    topic: str,
    *,
    attempts: int = MERGE_ATTEMPTS,
    pause: Callable[[float], None] = time.sleep,
) -> int | None:
    """Merge DataFrame ``frame`` into ``target``; returns how many rows it inserted (Delta's
    answer to a ``MERGE``; None if the answer has no such count). Retries a conflicting
    commit (after a short random pause, so members that collided spread out); raises the
    last conflict after ``attempts`` tries, and any other error at once."""
    view = f"merge_{uuid.uuid4().hex}"
    frame.createOrReplaceTempView(view)
    statement = merge_statement(target, view, ranges, with_topic=topic)
    try:
        for attempt in range(1, attempts + 1):
            try:
                answer = session.sql(statement).collect()
            except Exception as exc:
                if attempt == attempts or not is_write_conflict(exc):
                    raise
                log.debug("merge into %s conflicted (try %d), retrying", target, attempt)
                pause(random.uniform(0.05, 0.05 * 2 ** min(attempt, 5)))
                continue
            return _inserted(answer)
    finally:
        session.catalog.dropTempView(view)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _inserted(answer: Sequence[Any]) -> int | None:
    try:
        return int(answer[0]["num_inserted_rows"])
    except (IndexError, KeyError, TypeError, ValueError):
        return None
