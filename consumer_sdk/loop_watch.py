"""How late the consumer's event loop runs, and where it was while it ran late.

aiokafka heartbeats from a task on the consumer's event loop. Work that holds the loop (or
the GIL, from a sink's thread) delays them; a delay past the session timeout gets the member
evicted by the coordinator, and its next commit is refused with UnknownMemberId.

The watch sleeps a short period over and over and records how much later than asked it woke
up. A thread beside it samples the loop thread's stack while the loop has not woken for a
while, so the warning of a stall names the code that held the loop.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections import Counter, deque

from consumer_sdk import metrics

log = logging.getLogger(__name__)
PERIOD_S = 0.1
# Frames of a stack sample kept for the warning (innermost last).
STACK_DEPTH = 40
# Wake-ups kept for quantiles: the last ten minutes.
KEPT_WAKE_UPS = 6000


class LoopStallWatch:
    """Records the event loop's lateness (a histogram, and the worst so far) and warns when
    one stall reaches a third of the session timeout (at three such stalls in a row the
    coordinator has heard nothing for a whole session), with a sample of where the loop was.

    ``sample_after_s``: how long the loop must have been silent before its stack is sampled
    (default a tenth of the session timeout, at least two periods)."""

    def __init__(
        self, group: str, session_timeout_s: float, *, sample_after_s: float | None = None
    ) -> None:
        self.group = group
        self.session_timeout_s = session_timeout_s
        self.warn_after_s = session_timeout_s / 3
        default_sample_after_s = max(2 * PERIOD_S, session_timeout_s / 10)
        self.sample_after_s = sample_after_s or default_sample_after_s
        self.worst_s = 0.0
        self.recent: deque[float] = deque(maxlen=KEPT_WAKE_UPS)  # lateness, oldest first
        # Where the loop was, per sampled stall: the innermost frame's "file:line function".
        self.stall_sites: Counter[str] = Counter()
        self._task: asyncio.Task[None] | None = None
        self._sampler: threading.Thread | None = None
        self._sampler_stop = threading.Event()
        self._loop_thread_id: int | None = None
        self._last_wake = time.monotonic()
        self._stall_stack: list[str] | None = None  # sampled during the current stall

    def observe(self, late_s: float) -> None:
        """Account one wake-up ``late_s`` seconds after it was due."""
        late_s = max(0.0, late_s)
        metrics.LOOP_LATENESS.labels(self.group).observe(late_s)
        self.worst_s = max(self.worst_s, late_s)
        self.recent.append(late_s)
        stack, self._stall_stack = self._stall_stack, None
        if late_s >= self.warn_after_s:
            where = "".join(stack).rstrip() if stack else "  (no sample)"
            log.warning(
                "event loop of group %s's consumer was blocked for %.1f s: heartbeats were "
                "late by as much (session timeout %.1f s); the loop was at:\n%s",
                self.group,
                late_s,
                self.session_timeout_s,
                where,
            )

    def silent_s(self) -> float:
        """How long the loop has not woken the watch (0 while not watching)."""
        if self._task is None:
            return 0.0
        return max(0.0, time.monotonic() - self._last_wake)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of the recent wake-ups' lateness, in seconds."""
        if not self.recent:
            return 0.0
        ordered = sorted(self.recent)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def sample(self) -> None:
        """Take one sample of the loop thread's stack if the loop has been silent for
        ``sample_after_s`` and this stall has none yet (called by the sampler thread)."""
        thread_id = self._loop_thread_id
        silent_s = time.monotonic() - self._last_wake
        if thread_id is None or silent_s < self.sample_after_s or self._stall_stack is not None:
            return
        frame = sys._current_frames().get(thread_id)
        if frame is None:
            return
        summary = traceback.extract_stack(frame)[-STACK_DEPTH:]
        self._stall_stack = traceback.format_list(summary)
        innermost = summary[-1]
        self.stall_sites[f"{innermost.filename}:{innermost.lineno} {innermost.name}"] += 1

    async def _run(self) -> None:
        while True:
            asked = time.monotonic()
            await asyncio.sleep(PERIOD_S)
            self._last_wake = time.monotonic()
            self.observe(self._last_wake - asked - PERIOD_S)

    def _sample_until_stopped(self) -> None:
        interval = self.sample_after_s / 2
        while not self._sampler_stop.wait(interval):
            self.sample()

    def start(self) -> None:
        """Start watching on the running loop."""
        if self._task is not None:
            return
        self._loop_thread_id = threading.get_ident()
        self._last_wake = time.monotonic()
        self._task = asyncio.create_task(self._run())
        self._sampler_stop.clear()
        self._sampler = threading.Thread(
            target=self._sample_until_stopped, name=f"loop-watch-{self.group}", daemon=True
        )
        self._sampler.start()

    async def stop(self) -> None:
        """Stop watching."""
        task, self._task = self._task, None
        sampler, self._sampler = self._sampler, None
        self._sampler_stop.set()
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if sampler is not None:
            await asyncio.to_thread(sampler.join)
