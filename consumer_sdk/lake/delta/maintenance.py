"""Delta checkpoints and log clean-up beside the appends, not inside them.

Delta writes a checkpoint (the whole table state as Parquet) inside the commit whose version
is a multiple of ``delta.checkpointInterval``, in a Spark job: on two cores those appends took
4-10 s against 0.1-0.3 s for the others, and the consumer read nothing meanwhile (the
freshness p99 of ``make demo`` was 7.9 s against a p50 of 0.35 s). Tables the sink creates
therefore carry an interval no commit reaches (:data:`IN_COMMIT_INTERVAL`), and after each
append :class:`DeltaMaintenance` looks at how far the log is past its last checkpoint; at
``every`` commits or more it writes one in a thread of its own, with delta-rs (no Spark job,
no JVM), then removes log files past the table's retention as Delta's checkpoint does. One
writer at a time per table does it (a lock file beside the log, not waited for: another
process holding it is already at it). A checkpoint is only a faster start for readers: one
that fails is said in one line and tried again after the next append, and the table stays
correct without it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from consumer_sdk import metrics
from consumer_sdk.lake.delta.history import LOG_DIR
from consumer_sdk.lake.upkeep import BesideAppends, alone

log = logging.getLogger(__name__)

# What tables the sink creates are given as delta.checkpointInterval: Delta's own in-commit
# checkpoint never comes (2^31 - 1 commits), this module writes them instead.
IN_COMMIT_INTERVAL = 2**31 - 1
LAST_CHECKPOINT = "_last_checkpoint"
LOCK_FILE = ".kafka-autoscaler-maintenance.lock"


def last_checkpoint_version(table_root: Path) -> int:
    """The version of the table's last checkpoint (-1: none, or unreadable)."""
    try:
        content = json.loads((table_root / LOG_DIR / LAST_CHECKPOINT).read_text())
    except (OSError, ValueError):
        return -1
    version = content.get("version") if isinstance(content, dict) else None
    return version if isinstance(version, int) and version >= 0 else -1


def checkpoint_due(table_root: Path, every: int) -> bool:
    """Whether the log is ``every`` commits or more past its last checkpoint: the commit
    that many versions past it exists (versions are contiguous; clean-up removes only
    commits before a checkpoint). One stat after each append, not a listing of a log that
    keeps 30 days of commits."""
    due = max(last_checkpoint_version(table_root), 0) + every
    return (table_root / LOG_DIR / f"{due:020d}.json").exists()


def write_checkpoint(table_root: Path) -> None:
    """A checkpoint of the table's latest version, then the log's clean-up (delta-rs)."""
    from deltalake import DeltaTable

    table = DeltaTable(str(table_root))
    table.create_checkpoint()
    table.cleanup_metadata()


class DeltaMaintenance(BesideAppends):
    """Checkpoints of the tables this process appends to, one at a time, off the appends."""

    def __init__(self, every: int, checkpoint: Callable[[Path], None] = write_checkpoint) -> None:
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every!r}")
        super().__init__("delta-maintenance")
        self._every, self._checkpoint = every, checkpoint
        self.checkpoints = 0

    def committed(self, table_root: Path) -> None:
        """After an append to ``table_root``: start a checkpoint if one is due and none of
        this table runs (returns at once)."""
        with self._lock:
            if self._busy(table_root) or not checkpoint_due(table_root, self._every):
                return
            self._start(table_root, self._run, table_root)

    def _run(self, table_root: Path) -> None:
        try:
            with alone(table_root / LOG_DIR / LOCK_FILE) as held:
                if not held:
                    return  # another writer of this table is at it
                if not checkpoint_due(table_root, self._every):
                    return  # it has just written one
                started = time.monotonic()
                self._checkpoint(table_root)
                took = time.monotonic() - started
        except Exception as exc:  # a faster start for readers only: tried after the next append
            metrics.TABLE_MAINTENANCE_FAILURES.labels(table_root.name).inc()
            log.warning(
                "%s: writing a Delta checkpoint failed (%s: %s); tried again after the next "
                "append (readers replay the log meanwhile)",
                table_root.name,
                type(exc).__name__,
                exc,
            )
            return
        self.checkpoints += 1
        metrics.TABLE_MAINTENANCE_SECONDS.labels(table_root.name).observe(took)
        log.info(
            "%s: Delta checkpoint at version %d written beside the appends in %.2f s",
            table_root.name,
            last_checkpoint_version(table_root),
            took,
        )
