"""Waiting for a condition in a benchmark: poll it until it holds or time runs out.
(Finding the processes a run started: :func:`local_kafka.processes.processes_mentioning`.)"""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], bool], timeout_s: float, every_s: float = 0.05) -> bool:
    """Poll ``condition`` every ``every_s`` until true or ``timeout_s``; its last value."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(every_s)
    return condition()
