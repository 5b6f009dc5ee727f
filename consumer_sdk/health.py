"""What a consumer process's ``/healthz`` and ``/livez`` answer: ``ok``, or a line per problem.

Every consumer of the process registers a :class:`ConsumerHealth` while it runs. Its
problems are the ones a restart may cure or an operator must see: its group cannot be
joined (Kafka out of reach, credentials refused, ... as ``autoscaler_consumer_kafka_connect
_problem`` flags it), its sink cannot start, and an event loop silent for longer than the
session timeout (the coordinator has evicted the member by then; something holds the loop).
The endpoint answers from its own thread, so a wedged loop is reported rather than hiding it.
``/livez`` reports the wedged loop alone: a liveness probe should restart a process that
restarting cures, not every consumer of a cluster whose Kafka is down (``/healthz``, for a
readiness probe and for people, says that too).

Pure bookkeeping: the caller gives the loop's silence; no I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_lock = threading.Lock()
_registered: dict[int, ConsumerHealth] = {}


class ConsumerHealth:
    """One consumer's problems by kind; ``loop_silent_s`` says how long its event loop has
    not run (0 while it is not watched), and past ``stalled_after_s`` that is a problem."""

    def __init__(
        self, group: str, loop_silent_s: Callable[[], float], stalled_after_s: float
    ) -> None:
        if not stalled_after_s > 0:
            raise ValueError(f"stalled_after_s must be > 0, got {stalled_after_s!r}")
        self.group = group
        self.loop_silent_s = loop_silent_s
        self.stalled_after_s = stalled_after_s
        self._problems: dict[str, str] = {}

    def report(self, kind: str, line: str | None) -> None:
        """Set the problem of ``kind`` to ``line``, or clear it (None)."""
        with _lock:
            if line is None:
                self._problems.pop(kind, None)
            else:
                self._problems[kind] = line

    def problems(self) -> list[str]:
        """The current problems, a line each, naming the group."""
        with _lock:
            found = [f"group {self.group}: {line}" for _, line in sorted(self._problems.items())]
        return found + self.stalled()

    def stalled(self) -> list[str]:
        """The one problem a restart cures: the event loop silent past the threshold."""
        silent_s = self.loop_silent_s()
        if silent_s <= self.stalled_after_s:
            return []
        return [
            f"group {self.group}: the event loop has not run for {silent_s:.0f} s "
            f"(more than the session timeout, {self.stalled_after_s:.0f} s)"
        ]


def register(health: ConsumerHealth) -> None:
    """Count ``health`` in the process's ``/healthz`` until :func:`unregister`."""
    with _lock:
        _registered[id(health)] = health


def unregister(health: ConsumerHealth) -> None:
    """Stop counting ``health`` (a consumer that closed)."""
    with _lock:
        _registered.pop(id(health), None)


def process_problems() -> list[str]:
    """Every registered consumer's problems (empty: healthy): ``/healthz``."""
    return [line for health in _all() for line in health.problems()]


def process_stalls() -> list[str]:
    """Every registered consumer's stalled loop (empty: alive): ``/livez``."""
    return [line for health in _all() for line in health.stalled()]


def _all() -> list[ConsumerHealth]:
    with _lock:
        return list(_registered.values())
