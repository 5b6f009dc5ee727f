"""Waiting for work that a stop request must be able to cut short (SIGTERM at any moment)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def sleep_unless_stopped(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds`` (a retry's back-off, a tick's rest), or less if ``stop`` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def finished_unless_stopped(task: asyncio.Task[Any], stop: asyncio.Event) -> bool:
    """Wait until ``task`` is done or ``stop`` is set. If the stop came first, cancel the task
    (whatever it raises while it ends is of no interest) and return False; else True, with
    the task's result or exception left in it."""
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if task.done():
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    return False
