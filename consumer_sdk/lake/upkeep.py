"""Table upkeep run beside the appends: one thread, one job per table at a time.

What Delta's checkpoints (:mod:`consumer_sdk.lake.delta.maintenance`) and Iceberg's snapshot
expiry (:mod:`consumer_sdk.lake.iceberg.maintenance`) share: a job of a table starts only when
none of that table runs, an append never waits for one, and a clean stop lets the one in
progress end.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class BesideAppends:
    """One worker thread running at most one job per table (``thread_name`` names it)."""

    def __init__(self, thread_name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        self._running: dict[Hashable, Future[None]] = {}
        self._lock = threading.Lock()

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
