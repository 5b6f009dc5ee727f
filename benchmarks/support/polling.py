"""Waiting for a condition in a benchmark: poll it until it holds or time runs out; and
finding the processes a run started."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path


def wait_for(condition: Callable[[], bool], timeout_s: float, every_s: float = 0.05) -> bool:
    """Poll ``condition`` every ``every_s`` until true or ``timeout_s``; its last value."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(every_s)
    return condition()


def processes_mentioning(text: str) -> dict[int, list[str]]:
    """The command lines (their words) of live processes that mention ``text``, by pid."""
    found = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            raw = cmdline.read_bytes()
        except OSError:  # gone meanwhile
            continue
        if text.encode() in raw:
            found[int(cmdline.parent.name)] = raw.decode(errors="replace").split("\0")
    return found
