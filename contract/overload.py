"""When a member should ask its group for a re-plan (pure).

The group re-packs only when membership changes. Between scale events the speeds drift, so
a member can end up holding more than its capacity while others idle, and the sidecar's
count still looks right. A member that stays overloaded for ``sustain_s`` asks for a
rejoin (at most once per ``cooldown_s``); the leader's heuristic then re-packs, moving as
little as it can. It asks only when a re-pack can help (:func:`replan_can_help`).
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
        cooldown_s: float = 60.0,
        margin: float = 0.05,
    ) -> None:
        if capacity <= 0 or sustain_s < 0 or cooldown_s < 0 or margin < 0:
            raise ValueError("capacity must be > 0; sustain_s, cooldown_s, margin >= 0")
        self.limit = capacity * (1 + margin)
        self.sustain_s = sustain_s
        self.cooldown_s = cooldown_s
        self._over_since: float | None = None
        self._last_request: float | None = None

    def observe(self, now: float, load: float) -> bool:
        """Record the load at ``now``; True when a re-plan should be requested now."""
        if load <= self.limit:
            self._over_since = None
            return False
        if self._over_since is None:
            self._over_since = now
        cooled = self._last_request is None or now - self._last_request >= self.cooldown_s
        if now - self._over_since >= self.sustain_s and cooled:
            self._last_request = now
            self._over_since = None
            return True
        return False
