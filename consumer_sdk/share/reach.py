"""Whether a share member's client reaches Kafka: the ``kafka`` problem of its ``/healthz``.

librdkafka keeps reconnecting by itself and says so only in error events of its polls
(all brokers down, a transport or TLS failure, credentials or ACLs refused); it never says
when the brokers are back. So an error of that kind shows a problem at once, and while it
shows, a direct connection (:func:`contract.refusals.diagnose`) every ``recheck_s`` either
replaces it with the line naming the setting to check or clears it; records or a commit
coming through clear it too.

Bookkeeping only: the member makes the connection and hands the finding in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from consumer_sdk import metrics
from consumer_sdk.health import ConsumerHealth
from contract.refusals import Refusal

# librdkafka's names of the errors that say Kafka is out of reach or refuses the client.
UNREACHABLE = frozenset(
    {
        "_ALL_BROKERS_DOWN",
        "_TRANSPORT",
        "_RESOLVE",
        "_SSL",
        "_AUTHENTICATION",
        "SASL_AUTHENTICATION_FAILED",
        "TOPIC_AUTHORIZATION_FAILED",
        "GROUP_AUTHORIZATION_FAILED",
    }
)
# How often a problem is checked again by connecting.
RECHECK_S = 10.0


def error_name(error: object) -> str:
    """A librdkafka error's name (``KafkaError.name()``), "" for anything else."""
    name = getattr(error, "name", None)
    return str(name()) if callable(name) else ""


class KafkaReach:
    """The ``kafka`` problem of one share member's :class:`ConsumerHealth`."""

    def __init__(
        self,
        health: ConsumerHealth,
        *,
        recheck_s: float = RECHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.health = health
        self.recheck_s = recheck_s
        self.clock = clock
        self.problem: str | None = None
        self._checked_at = float("-inf")

    def polled(self, errors: Iterable[object], delivered: bool) -> None:
        """One poll's error events, and whether it ``delivered`` records."""
        for error in errors:
            # librdkafka repeats such errors while the outage lasts: only the first shows a
            # line and asks for a diagnosis now; then due() paces the checks.
            if error_name(error) in UNREACHABLE and self.problem is None:
                self._show(f"the share consumer cannot reach Kafka or is refused: {error}")
                self._checked_at = float("-inf")
        if delivered:
            self.reached()

    def reached(self) -> None:
        """Kafka answered (records, a commit): no problem."""
        self._show(None)
        self._flag(None)

    def due(self) -> bool:
        """Whether a problem is showing and its last check is ``recheck_s`` old."""
        return self.problem is not None and self.clock() - self._checked_at >= self.recheck_s

    def diagnosed(self, found: Refusal | None) -> None:
        """What connecting found: the refusal (its line replaces the problem's) or None
        (a broker took the connection: no problem)."""
        self._checked_at = self.clock()
        self._show(None if found is None else found.line)
        self._flag(found)

    def _show(self, line: str | None) -> None:
        self.problem = line
        self.health.report("kafka", line)

    def _flag(self, found: Refusal | None) -> None:
        metrics.flag_refusal(self.health.group, found)
