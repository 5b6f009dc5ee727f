"""Partitions whose fetched bytes fail their checks at the same offset, fetch after fetch.

A fetch that fails its check (a batch's CRC, batches that cannot be told apart) is fetched
again and the position stays. Bytes spoilt on the way fetch clean the next time; the same
offset failing :data:`STUCK_AFTER` times in a row is the broker's copy (its disk, its cache):
the partition is then reported stuck, in one line, on the health endpoint and as a metric,
and fetched again only after a growing pause (:func:`pause_for`). Nothing of
it is skipped: that takes someone who knows what the log holds. One table per process (the
fetcher it is fed from is aiokafka's, shared by the process's consumers), thread-safe.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

STUCK_AFTER = 3
# A stuck partition is fetched again after this pause, doubling up to the maximum.
FIRST_PAUSE_S, MAX_PAUSE_S = 1.0, 60.0


@dataclass(frozen=True)
class Failure:
    """A partition's fetches failing in a row at ``offset``."""

    offset: int
    count: int
    reason: str

    @property
    def stuck(self) -> bool:
        """Failed often enough in a row to be the broker's copy, not the wire."""
        return self.count >= STUCK_AFTER


class CorruptFetches:
    """Failures in a row per (topic, partition)."""

    def __init__(self) -> None:
        self._failures: dict[tuple[str, int], Failure] = {}
        self._lock = threading.Lock()

    def failed(self, topic: str, partition: int, offset: int, reason: str) -> Failure:
        """Count one failed fetch of ``partition`` at ``offset``; returns the run so far."""
        with self._lock:
            last = self._failures.get((topic, partition))
            count = last.count + 1 if last is not None and last.offset == offset else 1
            failure = Failure(offset, count, reason)
            self._failures[(topic, partition)] = failure
            return failure

    def read(self, topic: str, partition: int, offset: int) -> None:
        """``partition`` was read up to ``offset``: a run of failures before it is over."""
        if (topic, partition) not in self._failures:  # the common case, without the lock
            return
        with self._lock:
            last = self._failures.get((topic, partition))
            if last is not None and offset > last.offset:
                del self._failures[(topic, partition)]

    def stuck(self) -> dict[tuple[str, int], Failure]:
        """The partitions failing at one offset :data:`STUCK_AFTER` times or more in a row."""
        with self._lock:
            return {tp: f for tp, f in self._failures.items() if f.stuck}


def pause_for(failure: Failure) -> float:
    """How long a stuck partition waits before it is fetched again."""
    doublings = max(0, failure.count - STUCK_AFTER)
    return min(MAX_PAUSE_S, FIRST_PAUSE_S * 2.0 ** min(doublings, 16))


CORRUPT_FETCHES = CorruptFetches()
