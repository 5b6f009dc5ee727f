"""One line for a repeated complaint: the Kafka client logs every failed connection attempt
(aiokafka: ``Unable connect to node with id 1: ...`` several times a second while a broker is
down), which buries what the process itself says about it. :class:`RepeatedLines` lets the
first of a kind through and holds its repeats for ``window_s``; the next one after that says
how many were held.

A kind is the logger and the message's template (not its arguments: the node and the error
vary). Pure apart from the ``logging.Filter`` interface; the clock is given.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

# The loggers (and their children) whose warnings and errors are folded: the Kafka clients'.
NOISY_LOGGERS = ("aiokafka",)


class RepeatedLines(logging.Filter):
    """Passes the first warning or error of each kind from ``loggers``, then one per
    ``window_s`` saying how many were held back; every other record passes untouched."""

    def __init__(
        self,
        loggers: Sequence[str] = NOISY_LOGGERS,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s!r}")
        self.loggers = tuple(loggers)
        self.window_s = window_s
        self._clock = clock
        # Kind -> (when its last line went out, how many were held since).
        self._kinds: dict[tuple[str, str], tuple[float, int]] = {}

    def _folds(self, record: logging.LogRecord) -> bool:
        name = record.name
        return record.levelno >= logging.WARNING and any(
            name == logger or name.startswith(logger + ".") for logger in self.loggers
        )

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is written (a held count is added to its message)."""
        if not self._folds(record):
            return True
        kind = (record.name, str(record.msg))
        now = self._clock()
        seen = self._kinds.get(kind)
        if seen is not None and now - seen[0] < self.window_s:
            self._kinds[kind] = (seen[0], seen[1] + 1)
            return False
        if len(self._kinds) >= 1_000:  # bounded: templates are few, but never trust that
            self._kinds.clear()
        self._kinds[kind] = (now, 0)
        if seen is not None and seen[1]:
            # No % in the added text: the record's own arguments still format its message.
            record.msg = f"{record.msg} (and {seen[1]} more like it in {now - seen[0]:.0f} s)"
        return True


def quiet_repeats(window_s: float = 60.0) -> RepeatedLines:
    """Fold the Kafka clients' repeated warnings and errors on every handler of the root
    logger (call after ``logging.basicConfig``; a logger's own filter would not see its
    children's records)."""
    folding = RepeatedLines(window_s=window_s)
    for handler in logging.getLogger().handlers:
        handler.addFilter(folding)
    return folding
