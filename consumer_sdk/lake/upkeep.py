"""Table upkeep run beside the appends: one thread, one job per table at a time.

What Delta's checkpoints (:mod:`consumer_sdk.lake.delta.maintenance`) and Iceberg's snapshot
expiry (:mod:`consumer_sdk.lake.iceberg.maintenance`) share: a job of a table starts only when
none of that table runs, an append never waits for one, and a clean stop lets the one in
progress end; and a lock a job takes so that one writer process of a warehouse does it.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def alone(lock_path: Path) -> Iterator[bool]:
    """Whether this process holds ``lock_path`` now (a lock on the warehouse's filesystem,
    shared by the writer processes; not waited for: False when another holds it)."""
    with lock_path.open("a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class BesideAppends:
    """One worker thread running at most one job per table (``thread_name`` names it)."""

    def __init__(self, thread_name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        self._running: dict[Hashable, Future[None]] = {}
        self._commits: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def _start_every(
        self, table: Hashable, every: int, job: Callable[..., None], *arguments: Any
    ) -> None:
        """Count a commit of ``table``; at the ``every``-th since its last job, start
        ``job(*arguments)`` unless one of ``table`` runs (then at the next commit)."""
        with self._lock:
            count = self._commits.get(table, 0) + 1
            if count < every or self._busy(table):
                self._commits[table] = count
                return
            self._commits[table] = 0
            self._start(table, job, *arguments)

    def _busy(self, table: Hashable) -> bool:
        """Whether a job of ``table`` runs or waits (call holding ``self._lock``)."""
        running = self._running.get(table)
        return running is not None and not running.done()

    def _start(self, table: Hashable, job: Callable[..., None], *arguments: Any) -> None:
        """Queue ``job(*arguments)`` as ``table``'s (call holding ``self._lock``)."""
        self._running[table] = self._pool.submit(job, *arguments)

    def wait(self) -> None:
        """Until every job started has ended (tests, and a clean stop)."""
        with self._lock:
            running = list(self._running.values())
        for future in running:
            with contextlib.suppress(Exception):
                future.result()

    def close(self) -> None:
        """Let a job in progress end; start no more."""
        self._pool.shutdown(wait=True, cancel_futures=True)
