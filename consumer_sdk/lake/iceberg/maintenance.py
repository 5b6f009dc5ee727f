"""Iceberg snapshot expiry beside the appends, not inside them.

Each Iceberg commit writes a metadata file listing every snapshot so far (about 1.1 KB a
snapshot here): at the ~3,900 commits an hour of the default one-second freshness bound that
list, and the file every commit writes, grow without end. After every ``every`` commits of a
table, :class:`IcebergMaintenance` reads the table's snapshots (id, time, the sink's offsets),
chooses those older than the retention that no partition's resume needs
(:mod:`consumer_sdk.lake.iceberg.expiry`) and expires them through the session's Iceberg
(``java/kafkaautoscaler/iceberg/Expiry.java``), in a thread of its own, one table at a time.
Expiry is upkeep only: one that fails is said in one line and tried again after the next
``every`` commits, and the table stays correct without it. Writers of one table may expire
at once: Iceberg retries a commit that raced another, and ids already gone are skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from consumer_sdk import metrics
from consumer_sdk.lake.commit_offsets import SUMMARY_KEY
from consumer_sdk.lake.iceberg.expiry import SnapshotOffsets, snapshots_to_expire
from consumer_sdk.lake.jvm_appends import run_request
from consumer_sdk.lake.upkeep import BesideAppends
from contract.errors import first_line

log = logging.getLogger(__name__)

# Commits of a table by this process between two looks at its snapshots.
EXPIRE_EVERY = 100


def table_snapshots(session: Any, identifier: str) -> list[SnapshotOffsets]:
    """Every snapshot of the table ``identifier``, with the sink's offsets of each."""
    rows = session.sql(
        f"SELECT snapshot_id, unix_millis(committed_at) AS committed_ms, "
        f"summary['{SUMMARY_KEY}'] AS offsets FROM {identifier}.snapshots"
    ).collect()
    return [
        SnapshotOffsets(int(r["snapshot_id"]), int(r["committed_ms"]), r["offsets"]) for r in rows
    ]


def expire_snapshots(session: Any, identifier: str, ids: list[int]) -> int:
    """Expire ``ids`` of ``identifier`` (those still there); how many went."""
    return int(run_request(session, {"op": "iceberg.expire", "identifier": identifier, "ids": ids}))


class IcebergMaintenance(BesideAppends):
    """Snapshot expiry of the Iceberg tables this process appends to, off the appends."""

    def __init__(
        self,
        keep_secs: float,
        every: int = EXPIRE_EVERY,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if keep_secs <= 0 or every < 1:
            raise ValueError(f"keep_secs must be > 0 and every >= 1, got {keep_secs}, {every}")
        super().__init__("iceberg-maintenance")
        self._keep_ms, self._every, self._clock = int(keep_secs * 1000), every, clock
        self.expired = 0

    def committed(self, session: Any, identifier: str, name: str) -> None:
        """After an append to the table ``identifier`` (``name`` in logs and metrics): start
        an expiry every ``every`` commits unless one of this table runs (returns at once)."""
        self._start_every(identifier, self._every, self._run, session, identifier, name)

    def _run(self, session: Any, identifier: str, name: str) -> None:
        started = time.monotonic()
        try:
            snapshots = table_snapshots(session, identifier)
            now_ms = int(self._clock() * 1000)
            ids = snapshots_to_expire(snapshots, now_ms=now_ms, keep_ms=self._keep_ms)
            expired = expire_snapshots(session, identifier, ids) if ids else 0
        except Exception as exc:  # upkeep only: tried again after the next commits
            metrics.TABLE_MAINTENANCE_FAILURES.labels(name).inc()
            log.warning(
                "%s: expiring Iceberg snapshots failed (%s: %s); tried again after %d more "
                "commits (the table stays correct, its metadata only grows meanwhile)",
                name,
                type(exc).__name__,
                first_line(exc, lines=2)[:300],
                self._every,
            )
            return
        took = time.monotonic() - started
        self.expired += expired
        metrics.TABLE_MAINTENANCE_SECONDS.labels(name).observe(took)
        log.info(
            "%s: expired %d Iceberg snapshot(s) beside the appends in %.2f s, %d kept",
            name,
            expired,
            took,
            len(snapshots) - expired,
        )
