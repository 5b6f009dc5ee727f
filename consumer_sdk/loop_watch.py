"""How late the consumer's event loop runs: heartbeats are sent from it.

aiokafka heartbeats from a task on the consumer's event loop. Work that holds the loop (or
the GIL, from a sink's thread) delays them; a delay past the session timeout gets the member
evicted by the coordinator, and its next commit is refused with UnknownMemberId. The watch
sleeps a short period over and over and records how much later than asked it woke up.
"""

from __future__ import annotations

import asyncio
import logging
import time

from consumer_sdk import metrics

log = logging.getLogger(__name__)
PERIOD_S = 0.1


class LoopStallWatch:
    """Records the event loop's lateness (a histogram, and the worst so far) and warns when
    one stall reaches a third of the session timeout (at three such stalls in a row the
    coordinator has heard nothing for a whole session)."""

    def __init__(self, group: str, session_timeout_s: float) -> None:
        self.group = group
        self.session_timeout_s = session_timeout_s
        self.warn_after_s = session_timeout_s / 3
        self.worst_s = 0.0
        self._task: asyncio.Task[None] | None = None

    def observe(self, late_s: float) -> None:
        """Account one wake-up ``late_s`` seconds after it was due."""
        late_s = max(0.0, late_s)
        metrics.LOOP_LATENESS.labels(self.group).observe(late_s)
        self.worst_s = max(self.worst_s, late_s)
        if late_s >= self.warn_after_s:
            log.warning(
                "event loop of group %s's consumer was blocked for %.1f s: heartbeats were "
                "late by as much (session timeout %.1f s)",
                self.group,
                late_s,
                self.session_timeout_s,
            )

    async def _run(self) -> None:
        while True:
            asked = time.monotonic()
            await asyncio.sleep(PERIOD_S)
            self.observe(time.monotonic() - asked - PERIOD_S)

    def start(self) -> None:
        """Start watching on the running loop."""
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop watching."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
