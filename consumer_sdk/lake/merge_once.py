"""Writes that land each (topic, partition, offset) once whoever repeats them: for share-group
members (KIP-932), which read one partition together and get a record again when its
acquisition lock expired or its member died before acknowledging it.

A batch goes in by a ``MERGE`` on (topic, partition, offset) that inserts the rows the table
lacks. Two members merging at once cannot both insert a row, because each format checks a
merge's commit against what it read:

* Delta records what an insert-only ``MERGE`` read and refuses the second commit when the
  first added files where it read (``ConcurrentAppendException``).
* Spark turns an insert-only ``MERGE`` into an Iceberg table into a plain append, which
  checks nothing. So for Iceberg the statement carries a matched clause that never acts
  (offsets are never negative): Spark then plans a row-level merge, whose commit Iceberg
  validates (serializable isolation) and refuses once another commit added files that can
  hold the same keys ("Found conflicting files").

The loser retries, and then finds the rows. The ``ON`` clause also bounds the target by the
batch's offset range per partition, so only files whose statistics can hold those offsets
are read.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

MERGE_FORMATS = ("delta", "iceberg")
# Tries of one batch's merge while other members' commits conflict with it; each conflict
# means another member's commit went in, so the group as a whole progresses.
MERGE_ATTEMPTS = 30
# Words in the exceptions Delta and Iceberg raise when a concurrent commit conflicts with
# this one.
_CONFLICT_MARKERS = (
    "Concurrent",
    "ProtocolChanged",
    "MetadataChanged",
    "Found conflicting files",
    "CommitFailedException",
)
# Iceberg: a matched clause that never acts makes the merge a checked row-level operation.
_ICEBERG_CHECK = "WHEN MATCHED AND s.`offset` < 0 THEN DELETE "


def merge_statement(
    target: str,
    source: str,
    ranges: Mapping[int, tuple[int, int]],
    *,
    with_topic: str,
    table_format: str = "delta",
) -> str:
    """A ``MERGE`` of view ``source`` into table ``target`` inserting the rows whose (topic,
    partition, offset) it lacks, the target bounded by ``ranges`` (partition -> first and
    last offset); checked against concurrent commits in ``table_format`` (module doc)."""
    if table_format not in MERGE_FORMATS:
        raise ValueError(f"merges are checked in {', '.join(MERGE_FORMATS)}, not {table_format}")
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
        + (_ICEBERG_CHECK if table_format == "iceberg" else "")
        + "WHEN NOT MATCHED THEN INSERT *"
    )


def is_write_conflict(error: BaseException) -> bool:
    """Whether ``error`` is Delta or Iceberg refusing a commit because another one went in
    first."""
    text = f"{type(error).__name__}: {error}"
    return any(marker in text for marker in _CONFLICT_MARKERS)


def merge_once(
    session: Any,
    target: str,
    frame: Any,
    ranges: Mapping[int, tuple[int, int]],
    topic: str,
    *,
    table_format: str = "delta",
    attempts: int = MERGE_ATTEMPTS,
    pause: Callable[[float], None] = time.sleep,
) -> int | None:
    """Merge DataFrame ``frame`` into ``target``; returns how many rows it inserted (Delta's
    answer to a ``MERGE``; None if the answer has no such count). Retries a conflicting
    commit (after a short random pause, so members that collided spread out); raises the
    last conflict after ``attempts`` tries, and any other error at once."""
    view = f"merge_{uuid.uuid4().hex}"
    frame.createOrReplaceTempView(view)
    statement = merge_statement(target, view, ranges, with_topic=topic, table_format=table_format)
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
