"""Failures told in one line (a log line, a warning, /status)."""

from __future__ import annotations


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (Spark's carry a JVM stack trace after it), or
    its repr when it has no message."""
    text = str(error).strip()
    return text.splitlines()[0] if text else repr(error)
