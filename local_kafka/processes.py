"""Finding the processes a local harness, test or benchmark started, by their command line."""

from __future__ import annotations

from pathlib import Path


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
