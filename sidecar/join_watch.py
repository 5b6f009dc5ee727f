"""Never scale into failure: whether the consumers already asked for are at work, and why not.

A lag-driven scaler that adds consumers while the ones it has cannot join (a wrong password,
an ACL, a missing broker assignor, a sink that cannot start, an image that cannot be pulled)
adds consumers that fail the same way, up to its maximum (measured on Apache Kafka 4.3 with
the broker's assignor missing: 0 -> 4 -> 5 -> ... -> 9 in two minutes, no member ever
joined). So a scale-up is held while:

* the scaler reports members it started that fail now (a local consumer that exited, a pod
  waiting in CrashLoopBackOff or ImagePullBackOff), said at once with their own last error;
* or the group has fewer members than the replicas asked for, for ``JOIN_WITHIN_S`` (a
  member that runs but never joins, a pod that cannot be scheduled). A group with no member
  at all counts: that is the failure, not "nothing to wait for".

Once held, only members seen again lifts it: the group holding every replica asked for (or,
where the group cannot be described and no member reports, no failure left). A member
restarting after a crash would otherwise look healthy for the seconds between its start and
its next failure, long enough for a scale-up.

Pure: no I/O, no clock; :meth:`JoinWatch.observe` is given the time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# How long the group may have fewer members than the replicas asked for before that is a
# join failure (a classic group's first join waits out the broker's initial rebalance delay,
# then a round; a consumer whose sink starts a JVM first joins after it). Shorter than the
# controller's bounded wait for a scale-up to be taken in (GROUP_SETTLE_LIMIT_S, 60 s), so
# that wait never ends in a further scale-up while members are missing.
JOIN_WITHIN_S = 45.0


@dataclass(frozen=True)
class MemberFailure:
    """A member the scaler started that fails now."""

    member: str
    """Its name: the local consumer's identity, the pod's name."""
    reason: str
    """What failed, in its own words where they can be read (a consumer's last stderr line,
    a pod's waiting reason and message)."""


@dataclass(frozen=True)
class JoinProblem:
    """Why the replicas asked for are not all at work."""

    asked: int
    joined: int | None
    """Members the group has (None: the group cannot be described)."""
    failures: tuple[MemberFailure, ...]
    since: float
    """When the shortfall or the first failure was first seen."""
    words: tuple[MemberFailure, ...] = ()
    """What members that run but have not joined said last (named when none failed)."""

    def line(self, now: float) -> str:
        """One line: how many are missing, for how long, and the first member's own error."""
        joined = "unknown" if self.joined is None else str(self.joined)
        text = (
            f"consumers are not joining the group: {joined} of {self.asked} joined, "
            f"for {now - self.since:.0f} s"
        )
        named = self.failures or self.words
        if named:
            first = named[0]
            more = len(named) - 1
            text += f"; {first.member}: {first.reason}"
            if more:
                text += f" (and {more} more {'failing' if self.failures else 'said'})"
        return text


class JoinWatch:
    """See the module docstring."""

    def __init__(self, join_within_s: float = JOIN_WITHIN_S) -> None:
        if join_within_s <= 0:
            raise ValueError(f"join_within_s must be > 0, got {join_within_s!r}")
        self.join_within_s = join_within_s
        self._short_since: float | None = None  # fewer members than asked since
        self._failing_since: float | None = None  # the scaler reported failures since
        self.problem: JoinProblem | None = None

    def observe(
        self,
        now: float,
        asked: int,
        joined: int | None,
        failures: Sequence[MemberFailure],
        words: Sequence[MemberFailure] = (),
    ) -> JoinProblem | None:
        """Take in one round: the replicas asked for, the members the group has (None:
        unknown), the scaler's failing members (``words``: what running members said last,
        only to name the cause). Returns the problem that holds scale-ups
        now (also kept in :attr:`problem`), None when the consumers asked for are at work."""
        short = joined is not None and joined < asked
        self._short_since = _since(self._short_since, now) if short else None
        self._failing_since = _since(self._failing_since, now) if failures else None
        if self.problem is not None and not failures and not short:
            self.problem = None  # members seen again (or, unknown, no failure left)
        held_short = self._short_since is not None and now - self._short_since >= (
            self.join_within_s
        )
        if failures or held_short or (self.problem is not None and short):
            starts = [t for t in (self._short_since, self._failing_since) if t is not None]
            self.problem = JoinProblem(
                asked, joined, tuple(failures), min(starts, default=now), tuple(words)
            )
        return self.problem


def _since(since: float | None, now: float) -> float:
    """When a condition seen now began: ``since`` if it was already under way."""
    return now if since is None else since
