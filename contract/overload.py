"""When a member should ask its group for a re-plan (pure).

The group re-packs only when membership changes. Between scale events the speeds drift, so
a member can end up holding more than its capacity while others idle, and the sidecar's
count still looks right. A member above its capacity (beyond ``margin``) asks for a rejoin
(at most once per ``cooldown_s``); the leader's heuristic then re-packs, moving as little as
it can. It asks only when a re-pack can help (:func:`replan_can_help`).

How soon it asks depends on how far over it is. Its records wait longer by (load -
capacity) / capacity seconds every second, so it asks once that owed time reaches what a
member just over the margin owes after ``sustain_s`` (``margin * sustain_s``), and at the
latest after ``sustain_s``; never before ``min_over_s`` (one high snapshot is no trend).
Measured on Apache Kafka: a member drifted to 1.5x its capacity and waited the whole 30 s,
its records 24 s late; now it asks after about 5 s. The cooldown is ``sustain_s`` unless
given: a leader packs members close to their capacity, and on a volatile load a member was
over it again 24 s after its re-plan, then waited out a 60 s cooldown while its records
fell 6 s behind.
"""

from __future__ import annotations

from collections.abc import Mapping

from assignor import TopicPartition, bins_used, get_heuristic


def replan_can_help(
    speeds: Mapping[TopicPartition, float], capacity: float, members: int | None, heuristic: str
) -> bool:
    """Whether a re-pack could take every member below ``capacity``: the speeds fit in the
    group's ``members`` (None: the leader did not say; assume it can). When they do not,
    the sidecar adds members (it packs the same speeds), and a re-plan now would only add a
    rebalance in front of that scale-up's own."""
    if members is None:
        return True
    if not any(speeds.values()):
        return True
    packed = get_heuristic(heuristic).assign(dict(speeds), capacity=capacity)
    return bins_used(packed) <= members


class OverloadWatch:
    """Feed it the member's load now and then; it says when to ask for a re-plan."""

    def __init__(
        self,
        capacity: float,
        sustain_s: float = 30.0,
        cooldown_s: float | None = None,
        margin: float = 0.05,
        min_over_s: float = 5.0,
    ) -> None:
        cooldown_s = sustain_s if cooldown_s is None else cooldown_s
        if capacity <= 0 or min(sustain_s, cooldown_s, margin, min_over_s) < 0:
            raise ValueError("capacity must be > 0; sustain_s, cooldown_s, margin, min_over_s >= 0")
        self.capacity = capacity
        self.margin = margin
        self.limit = capacity * (1 + margin)
        self.sustain_s = sustain_s
        self.cooldown_s = cooldown_s
        self.min_over_s = min(min_over_s, sustain_s)
        # Seconds of delay owed when a member just over the margin has waited sustain_s.
        self.owed_limit_s = margin * sustain_s
        self._over_since: float | None = None
        self._last: tuple[float, float] | None = None  # (time, load) of the last observation
        self._owed_s = 0.0
        self._last_request: float | None = None
        # (seconds over the limit, seconds of delay owed) when it last asked.
        self.asked_after: tuple[float, float] = (0.0, 0.0)

    def observe(self, now: float, load: float, capacity: float | None = None) -> bool:
        """Record the load at ``now``; True when a re-plan is due now. Counting starts over
        either way; the cooldown starts only when the member asks (:meth:`asked`): a re-plan
        found not to help (the sidecar adds members instead) must not silence the member
        for the next ``cooldown_s``. ``capacity``: the one measured now, when known."""
        if capacity is not None and capacity > 0 and capacity != self.capacity:
            self.capacity = capacity
            self.limit = capacity * (1 + self.margin)
        last, self._last = self._last, (now, load)
        if load <= self.limit:
            self._over_since = None
            self._owed_s = 0.0
            return False
        if self._over_since is None:
            self._over_since = now
        elif last is not None and now > last[0]:
            # The load held since the last observation made its records wait this much longer.
            self._owed_s += max(0.0, last[1] - self.capacity) / self.capacity * (now - last[0])
        over_s = now - self._over_since
        due = over_s >= self.sustain_s or (
            over_s >= self.min_over_s and self._owed_s >= self.owed_limit_s
        )
        cooled = self._last_request is None or now - self._last_request >= self.cooldown_s
        if due and cooled:
            self.asked_after = (over_s, self._owed_s)
            self._over_since = None
            self._owed_s = 0.0
            return True
        return False

    def asked(self, now: float) -> None:
        """The member asked for the re-plan :meth:`observe` found due: cool down."""
        self._last_request = now
