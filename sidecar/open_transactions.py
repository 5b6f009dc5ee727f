"""Transactions left open: a partition's last stable offset stuck below its high watermark.

A read_committed consumer reads a partition up to its last stable offset (LSO): the first
offset of the oldest transaction still open on it. While a producer holds a transaction
open, the LSO stays put and the records written after it (its own and every other
producer's) wait, unreadable; the sidecar measures lag to the LSO, so they are not a
backlog and no reason to scale up. A transaction open across two readings is reported: a
partition is flagged when its LSO is below its high watermark in two readings in a row
without moving. Producers that commit on a checkpoint (Flink, Kafka Streams at
``commit.interval.ms``) are flagged while a checkpoint is longer than the interval; one
left open for minutes is the stuck producer worth an alert. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from assignor import TopicPartition


@dataclass(frozen=True)
class HeldOpen:
    """A partition whose reading waits for a transaction: its LSO since ``since``."""

    stable: int
    end: int
    since: float

    @property
    def waiting(self) -> int:
        """Records written after the LSO: what read_committed readers wait for."""
        return max(0, self.end - self.stable)


class OpenTransactions:
    """Follows each partition's LSO and high watermark across readings."""

    def __init__(self) -> None:
        # Partition -> (LSO, when it was first seen below the high watermark at that LSO).
        self._below: dict[TopicPartition, tuple[int, float]] = {}
        self.held: dict[TopicPartition, HeldOpen] = {}

    def observe(
        self, at: float, stable: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, HeldOpen]:
        """Take one reading's LSOs and high watermarks (at ``at``); the partitions whose
        LSO has stayed below the high watermark since the reading before, or longer."""
        below: dict[TopicPartition, tuple[int, float]] = {}
        held: dict[TopicPartition, HeldOpen] = {}
        for tp, lso in stable.items():
            end = ends.get(tp)
            if end is None or lso >= end:
                continue
            seen = self._below.get(tp)
            if seen is not None and seen[0] == lso:
                below[tp] = seen
                held[tp] = HeldOpen(lso, end, seen[1])
            else:
                below[tp] = (lso, at)
        self._below = below
        self.held = held
        return held


def held_open_line(tp: TopicPartition, held: HeldOpen) -> str:
    """The one line that reports ``held`` (the same while it lasts: logged once a minute)."""
    return (
        f"{tp.topic}:{tp.partition}: a transaction is open: the last stable offset stays at "
        f"{held.stable} while records are written after it; read_committed consumers wait "
        "for it to end (not counted as lag, no reason to scale up)"
    )
