"""Failures told in one line (a log line, a warning, /status)."""

from __future__ import annotations


def first_line(error: BaseException, lines: int = 1) -> str:
    """The first line of ``error``'s message (Spark's carry a JVM stack trace after it), or
    its repr when it has no message. ``lines`` > 1 joins that many non-empty lines with "; "
    (a Java error through py4j says where it was called first, then the Java exception)."""
    text = str(error).strip()
    if not text:
        return repr(error)
    first, *rest = text.splitlines()
    more = [line.strip(" :") for line in rest if line.strip(" :")]
    return "; ".join([first, *more][:lines])
