"""The replica controller: a pure state machine (synchronise -> watch -> plan -> scale).

No I/O and no clock of its own: every :meth:`Controller.step` gets an observation stamped
with the time it was measured, and the controller reads "now" from an injected clock.

* synchronise: until the scaler reports the actual replica count, nothing is decided;
* watch: no data, or data older than ``max_data_age_s``, means hold (never act on stale data);
* plan: the chosen heuristic packs the partitions (members=None, starting from its last
  plan, so the plan stays sticky; with the default heuristic and the partitions' racks in
  the observation, the rack-aware repair, whose count leaves each rack room for what it
  leads, at most one consumer more than rack-blind) on *effective* speeds
  (assignor.backlog: speed plus the backlog beyond ``lag_allowance_s`` of arrivals, paid
  off within ``drain_seconds``), the
  same rule the group's assignor packs by, so the consumers a backlog adds get work;
* share groups (KIP-932, ``group_type="share"``): members share partitions, so the count
  is the effective load over one consumer's capacity, rounded up, whatever the partitions,
  and the partition count is no cap (the broker's ``group.share.max.size`` is);
* scale: clamp to [min_replicas, min(max_replicas, partitions)] (the partition count wins
  over min_replicas: extra members would sit idle); scale up at once; scale down, to the
  highest demand of the last quarter of ``scale_down_window_s``, once the consumers above
  that peak, added up over the time demand has been lower, make one consumer held for the
  whole window (one surplus consumer waits the window, four about a quarter of it; never
  sooner than a quarter). Holding a surplus costs consumer-seconds at its size; a
  scale-down costs one rebalance and the risk of undoing it, whatever its size, so a large
  drop is acted on sooner (measured on Apache Kafka: 6 consumers held 120 s after a step
  down to 2 were a fifth of the run's consumer-seconds);
* one step, few scale-ups: within ``scale_up_settle_s`` after a scale-up, a further one
  waits for that time to pass. The speeds that sized the first are still filling their
  window (a step up shows over the recent window's span), and the backlog grows while the
  new members join; a decision once it has passed sizes the rest of the step at once,
  instead of a rebalance per consumer (measured: 2 -> 3 -> 4 -> 5 in 6 s without it);
* one rebalance at a time: after a scale-up, a further one also waits (at most
  ``GROUP_SETTLE_LIMIT_S``) until the group has taken it in: stable, with at least as many
  members as replicas were asked for (a group with no member yet is not waited for). While
  a group rebalances its members defer their offset commits, so the lag it shows includes
  records already written; sizing on it adds consumers, whose joins defer commits again
  (the 60-second demo: five scale-ups in 28 s, lag growing at the production rate while the
  tables filled). Needs DescribeGroups (the embedded broker lacks it: settle time only);
  a scale-up also waits (at most ``GROUP_SETTLE_LIMIT_S``) while the group rebalances for
  another cause, a member's re-plan request or a member leaving: joining a round under way
  stretches it, and the scale-up's own two rounds then count three generations (measured on
  Apache Kafka: a re-plan request 2 s before a scale-up);
* measured, not assumed: an observation may carry the capacity the consumers measured
  (sidecar.capacity; ``--capacity auto``), used instead of the configured one; a consumer
  started but not reading yet counts as coming capacity (``group_holds`` falls back on the
  members seen committing where the group cannot be described); and the drain ceiling
  (sidecar.drain_ceiling) caps the count when more consumers did not drain more, going
  back to the count that drained best at once;
* no flaps: within ``scale_down_window_s`` after a scale-down, scale up again only when the
  arrival speeds alone need more consumers than the group has (the load really rose). A
  backlog alone, typically built by the scale-down's own rebalance, is drained by the
  consumers there are; it counts again once that window has passed. Within that window
  after a scale-up, no scale-down at all: a surplus-sized scale-down can come sooner than
  the window after demand falls, and if the fall follows a scale-up closely that reversed
  it (measured on Apache Kafka: 5 -> 6 for a backlog 17 s before the step down, 6 -> 2
  74 s after it); the surplus keeps adding up meanwhile, so it goes ahead when the window
  has passed;
* a wrong guess is undone, not stabilised: a count sized with a capacity since measured
  ``CAPACITY_MOVED`` away (``--capacity auto`` starting from its initial value) comes down
  after a quarter of the window of lower demand in the measured capacity, without the
  surplus to add up or the no-reversal wait; those guard against a load that may return,
  and the capacity was what was wrong.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from assignor import DEFAULT_HEURISTIC, Assignment, TopicPartition, bins_used, get_heuristic
from assignor import rscore as plan_rscore
from assignor.backlog import DrainRule
from assignor.racks import RACK_AWARE_BASE, RackAwareRepair, RackLayout
from assignor.validation import is_finite_number, is_integer
from contract.settings import GROUP_TYPES
from sidecar.drain_ceiling import DrainCeiling

# The longest a scale-up waits for the group to take in the one before: members that joined
# but read nothing (given no partition) must not stop the group from growing. Members that
# never join are sidecar.join_watch's, which holds scale-ups from sooner (JOIN_WITHIN_S).
GROUP_SETTLE_LIMIT_S = 60.0
# The group counts as saturated (its drain is what it can do, for the drain ceiling) while
# its lag is at least this many seconds of arrivals beyond the batch allowance, and records.
SATURATED_LAG_S = 10.0
SATURATED_LAG_MIN = 1_000.0
# A scale-down goes to the highest demand of the last quarter of the scale-down window, not
# of the whole window: its first seconds are usually the backlog of the load that just
# dropped being drained, and sizing for them kept consumers a whole extra window.
RECENT_PEAK_SHARE = 0.25
# A measured capacity this far (as a ratio) from the one the count was sized with makes that
# count a correction to undo, not a load decision to stabilise (see _scale_down_wait).
CAPACITY_MOVED = 1.25


class Phase(StrEnum):
    """Where the controller is."""

    SYNCHRONISE = "synchronise"
    WATCH = "watch"
    PLAN = "plan"
    SCALE = "scale"


class Action(StrEnum):
    """What a decision asks the scaler to do."""

    WAIT = "wait"  # not synchronised with the scaler yet
    HOLD = "hold"
    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"


@dataclass(frozen=True)
class ControllerConfig:
    """Knobs of the controller; validated with messages naming the flag."""

    capacity: float
    heuristic: str = DEFAULT_HEURISTIC
    min_replicas: int = 1
    max_replicas: int = 100
    scale_down_window_s: float = 120.0
    drain_seconds: float = 30.0
    lag_allowance_s: float = 0.0
    max_data_age_s: float = 10.0
    scale_up_settle_s: float = 0.0
    # "consumer" (a partition has one member) or "share" (KIP-932: members share partitions).
    group_type: str = "consumer"

    def __post_init__(self) -> None:
        get_heuristic(self.heuristic)  # ValueError listing the valid names

        def fail(flag: str, accepted: str, value: object) -> None:
            raise ValueError(f"{flag} must be {accepted}, got {value!r}")

        if not (is_finite_number(self.capacity) and self.capacity > 0):
            fail("--capacity", "a finite number > 0", self.capacity)
        if not (is_integer(self.min_replicas) and self.min_replicas >= 0):
            fail("--min-replicas", "an integer >= 0", self.min_replicas)
        if not (is_integer(self.max_replicas) and self.max_replicas >= max(1, self.min_replicas)):
            fail("--max-replicas", "an integer >= max(1, --min-replicas)", self.max_replicas)
        if not (is_finite_number(self.scale_down_window_s) and self.scale_down_window_s >= 0):
            fail("--scale-down-window", "a number of seconds >= 0", self.scale_down_window_s)
        if not (is_finite_number(self.drain_seconds) and self.drain_seconds > 0):
            fail("--drain-seconds", "a number of seconds > 0", self.drain_seconds)
        if not (is_finite_number(self.lag_allowance_s) and self.lag_allowance_s >= 0):
            fail("--wait-time-secs", "a number of seconds >= 0", self.lag_allowance_s)
        if not (is_finite_number(self.max_data_age_s) and self.max_data_age_s > 0):
            fail("--max-data-age", "a number of seconds > 0", self.max_data_age_s)
        if not (is_finite_number(self.scale_up_settle_s) and self.scale_up_settle_s >= 0):
            fail("--scale-up-settle", "a number of seconds >= 0", self.scale_up_settle_s)
        if self.group_type not in GROUP_TYPES:
            fail("--group-type", f"one of {', '.join(GROUP_TYPES)}", self.group_type)

    @property
    def drain_rule(self) -> DrainRule:
        """How backlog turns into speed (shared with the group's assignor via the snapshot)."""
        return DrainRule(self.drain_seconds, self.lag_allowance_s)


@dataclass(frozen=True)
class Observation:
    """What the monitor measured, and when (on the controller's clock)."""

    at: float
    speeds: Mapping[TopicPartition, float]
    # In the speeds' quantity (bytes of log when speeds are bytes/s): backlog adds to speed.
    lags: Mapping[TopicPartition, float] = field(default_factory=dict)
    # In records, for rules counted in records (KEDA's lagThreshold); None: ``lags`` are.
    record_lags: Mapping[TopicPartition, float] | None = None
    # The group as its coordinator describes it: whether it is stable (not rebalancing) and
    # how many members it has; None when unknown (then no decision waits for it).
    group_stable: bool | None = None
    group_members: int | None = None
    # What one consumer drains, as measured (None: size with the configured capacity).
    capacity: float | None = None
    # The sum of the group's committed offsets (None: unknown), for the drain ceiling.
    committed_total: int | None = None
    # False when this round's offsets could not be read: its lags are not known.
    lags_known: bool = True
    # Members seen committing lately (their capacity reports), where the coordinator
    # cannot describe the group; None when unknown.
    reading_members: int | None = None
    # The members report with their commits (the group runs our assignor): a described
    # member not seen committing yet has joined but not started reading.
    members_report: bool = False
    # Of them, those with a fresh saturated measurement (None: unknown, members that do not
    # report): a count is evidence of a bottleneck downstream only if all were behind.
    saturated_members: int | None = None
    # The racks each partition is local to: the plan is then rack-aware (None: rack-blind).
    partition_racks: Mapping[TopicPartition, frozenset[str]] | None = None
    # The most members the group may have (a share group's group.share.max.size; None: the
    # partition count for a consumer group, no cap of its own for a share group).
    max_members: int | None = None
    # Why the consumers asked for are not all at work (sidecar.join_watch: members failing,
    # or not joined for long): no scale-up adds consumers that would fail alike.
    join_problem: str | None = None

    def group_holds(self, replicas: int) -> bool | None:
        """Whether the group is stable with at least ``replicas`` members; None: unknown.
        A described group with no member holds none (consumers asked for and none joined:
        measured on Apache Kafka, a scale-up a second while no member could join). Without
        a description, members seen committing count: fewer than ``replicas`` means some
        have not started reading."""
        if self.group_stable is None or self.group_members is None:
            if self.reading_members:
                return self.reading_members >= replicas
            return None
        return self.group_stable and self.group_members >= replicas

    def lags_in_records(self) -> Mapping[TopicPartition, float]:
        """Lags in records (``lags`` when the speeds are records/s)."""
        return self.lags if self.record_lags is None else self.record_lags


@dataclass(frozen=True)
class Decision:
    """One step's outcome; every decision carries its reason and planned Rscore."""

    at: float
    action: Action
    current: int
    desired: int
    demand: int | None
    reason: str
    planned_rscore: float = 0.0


class Controller:
    """See the module docstring."""

    def __init__(self, config: ControllerConfig, clock: Callable[[], float]) -> None:
        self.config = config
        self.clock = clock
        self.phase = Phase.SYNCHRONISE
        self.replicas: int | None = None
        self.plan: Assignment = {}
        # The rack of each consumer of the plan (rack-aware sizing), and why the last plan
        # with racks given was rack-blind (None: it was not).
        self.plan_racks: dict[str, str] = {}
        self.rack_note: str | None = None
        self._lower_since: float | None = None
        # (time, target) of the lower demand since _lower_since, for the recent peak.
        self._lower: deque[tuple[float, int]] = deque()
        # Consumer-seconds above the recent peak since _lower_since.
        self._surplus_held = 0.0
        self._scaled_down_at: float | None = None
        self._scaled_up_at: float | None = None
        # The capacity the last scale decision sized with, and the one the lower demand
        # since _lower_since is counted in (None: not sized here, or nothing lower).
        self._sized_with: float | None = None
        self._lower_with: float | None = None
        # Since when the group has been described as rebalancing (None: stable or unknown).
        self._rebalancing_since: float | None = None
        self.drain_ceiling = DrainCeiling()

    def synchronise(self, actual_replicas: int) -> None:
        """Adopt the replica count the scaler reports (at start, after a failed scale)."""
        if not is_integer(actual_replicas) or actual_replicas < 0:
            raise ValueError(f"actual_replicas must be an integer >= 0, got {actual_replicas!r}")
        self.replicas = actual_replicas
        self._lower_since = None
        self._sized_with = None
        self.phase = Phase.WATCH

    def _guard(self, observation: Observation | None) -> Decision | None:
        """The decision when there is nothing to decide on: not synchronised with the
        scaler, nothing measured, or data too old; None when the observation can be used."""
        now = self.clock()
        if self.replicas is None:
            return Decision(now, Action.WAIT, 0, 0, None, "synchronising with the scaler")
        current = self.replicas
        self.phase = Phase.WATCH
        why: str | None = None
        if observation is None or not observation.speeds:
            why = "no speeds measured yet"
        elif not observation.lags_known:
            # A broker that does not answer is not a backlog: lags taken as whole logs while
            # the committed offsets were unreadable scaled the group to its maximum during
            # broker kills.
            why = "the group's offsets could not be read this round: lag unknown"
        elif now - observation.at > self.config.max_data_age_s:
            age = now - observation.at
            why = f"data is {age:.0f} s old (max {self.config.max_data_age_s:.0f} s)"
        return None if why is None else Decision(now, Action.HOLD, current, current, None, why)

    def step(self, observation: Observation | None) -> Decision:
        """Decide from the latest observation (None: nothing measured yet)."""
        held = self._guard(observation)
        if held is not None or observation is None or self.replicas is None:
            assert held is not None
            return held
        return self._decide(self.clock(), self.replicas, observation)

    def _decide(self, now: float, current: int, observation: Observation) -> Decision:
        """The decision on a fresh observation, synchronised with the scaler."""
        self.phase = Phase.PLAN
        # A group with no member (Empty, Dead) is not stable, but no round is under way.
        if observation.group_stable is False and observation.group_members:
            self._rebalancing_since = (
                self._rebalancing_since if self._rebalancing_since is not None else now
            )
        else:
            self._rebalancing_since = None
        plan, demand, backlog = self._plan(observation)
        capacity = self._capacity(observation)
        planned = plan_rscore(self.plan, plan, observation.speeds, capacity)
        self.plan = plan
        self.drain_ceiling.observe(
            now,
            current,
            observation.committed_total,
            backlogged=self._saturated(observation),
            ready=self._all_reading(now, observation, current)
            and self._all_saturated(observation, current),
        )
        ceiling = max(1, min(self.config.max_replicas, self._member_cap(observation)))
        limit = self.drain_ceiling.limit()
        if limit is not None:
            ceiling = max(self.config.min_replicas, min(ceiling, limit))
        target = min(ceiling, max(self.config.min_replicas, demand))
        self.phase = Phase.SCALE
        why = f"{demand} consumer(s) of {capacity:.0f} needed for the speeds" + (
            f" plus a backlog of {backlog:.0f} drained in {self.config.drain_seconds:.0f} s"
            if backlog
            else ""
        )
        if target != demand:
            why += f", clamped to {target}"
        if limit is not None and limit < demand:
            why += f" ({self.drain_ceiling.reason})"
            if current > ceiling:
                return self._scale_down(now, current, ceiling, demand, why, planned, capacity)
        if target > current and self._reverses_scale_down(now, observation, current):
            why += (
                f"; held: scaled down {now - (self._scaled_down_at or now):.0f} s ago and "
                f"the speeds alone need at most {current} (a backlog alone does not reverse a "
                f"scale-down within {self.config.scale_down_window_s:.0f} s)"
            )
            return Decision(now, Action.HOLD, current, current, demand, why, planned)
        wait = self._scale_up_wait(now, observation, current) if target > current else None
        if wait is not None:
            self._lower_since = None
            return Decision(
                now, Action.HOLD, current, current, demand, f"{why}; held: {wait}", planned
            )
        if target > current:
            self._lower_since = None
            self._scaled_down_at = None
            self._scaled_up_at = now
            self._sized_with = capacity
            self.replicas = target
            return Decision(now, Action.SCALE_UP, current, target, demand, why, planned)
        if target == current:
            self._lower_since = None
            return Decision(now, Action.HOLD, current, current, demand, why, planned)
        window = self.config.scale_down_window_s
        if self._lower_since is None or _moved(self._lower_with, capacity):
            # Demands counted in another capacity are not this one's: its peak starts anew.
            self._lower_since = now
            self._lower_with = capacity
            self._lower.clear()
            self._surplus_held = 0.0
        else:
            # Left sum: the surplus over the last interval is the one the last step saw.
            self._surplus_held += (current - self._recent_peak()) * (now - self._lower[-1][0])
        self._lower.append((now, target))
        while self._lower[0][0] < now - window * RECENT_PEAK_SHARE:
            self._lower.popleft()
        held = (
            f"lower for {now - self._lower_since:.0f} s, "
            f"{self._surplus_held:.0f} surplus consumer-s"
        )
        wait = self._scale_down_wait(now, held, capacity)
        if wait is not None:
            return Decision(now, Action.HOLD, current, current, demand, f"{why}; {wait}", planned)
        return self._scale_down(
            now,
            current,
            self._recent_peak(),
            demand,
            f"{why}; {held}, down to the peak of its last {window * RECENT_PEAK_SHARE:.0f} s",
            planned,
            capacity,
        )

    def _scale_down_wait(self, now: float, held: str, capacity: float) -> str | None:
        """Why a scale-down waits now; None: it does not. A count sized with a capacity
        since measured ``CAPACITY_MOVED`` away (the initial guess of ``--capacity auto``)
        was a mistake, not a load that may come back: it waits only the quarter window of
        lower demand, in the new capacity, that any scale-down waits (measured on Apache
        Kafka: 4 consumers sized with 500/s held 93 s where 2 of the measured 900/s did)."""
        window = self.config.scale_down_window_s
        quarter = window * RECENT_PEAK_SHARE
        waited = now - self._lower_since if self._lower_since is not None else 0.0
        sized_with = self._sized_with
        if sized_with is not None and _moved(sized_with, capacity):
            if waited < quarter:
                return (
                    f"{held}; sized with a capacity of {sized_with:.0f}, measured "
                    f"{capacity:.0f} since: down after {quarter:.0f} s"
                )
            return None
        if waited < quarter or self._surplus_held < window:
            return f"{held} of {window:.0f} before scaling down (at least {quarter:.0f} s)"
        since_up = now - self._scaled_up_at if self._scaled_up_at is not None else window
        if since_up < window:
            return f"{held}, but scaled up {since_up:.0f} s ago: no reversal within {window:.0f} s"
        return None

    def _scale_down(
        self,
        now: float,
        current: int,
        desired: int,
        demand: int,
        why: str,
        planned: float,
        capacity: float,
    ) -> Decision:
        self._lower_since = None
        self._sized_with = capacity
        self._scaled_down_at = now
        self.replicas = desired
        return Decision(
            now, Action.SCALE_DOWN, current, desired, demand, f"{why}; down to {desired}", planned
        )

    def _all_reading(self, now: float, observation: Observation, current: int) -> bool:
        """Whether the group has taken ``current`` in and every member is at work (seen
        committing, where that is known): a count whose added members got no partitions
        (packed by a capacity too high) did not drain more, but says nothing of a limit
        downstream."""
        reading = observation.reading_members
        return not self._joining(now, observation, current) and (
            reading is None or reading >= current
        )

    @staticmethod
    def _all_saturated(observation: Observation, current: int) -> bool:
        """Whether each of ``current`` members was measured behind lately (True where
        unknown). A member given a small share drains little and says nothing of a limit
        downstream (measured on Apache Kafka: a capacity declared at twice the true one
        gave a second member 1 of 24 partitions; 2 drained 987/s against 1's 959/s, and
        the ceiling held the group at 1 while its lag grew to 322,000)."""
        saturated = observation.saturated_members
        return saturated is None or saturated >= current

    def _saturated(self, observation: Observation) -> bool:
        """Whether the group is behind by more than it could be while keeping up: a lag of
        at least ``SATURATED_LAG_S`` seconds of arrivals beyond the batch allowance (and
        ``SATURATED_LAG_MIN`` records). A group with spare capacity pays a small backlog off
        in seconds; its drain then is its load, not what it can do."""
        lag = sum(observation.lags.values())
        speed = sum(observation.speeds.values())
        allowance = self.config.lag_allowance_s + SATURATED_LAG_S
        records = sum(observation.lags_in_records().values())
        return records >= SATURATED_LAG_MIN and lag >= speed * allowance

    def _capacity(self, observation: Observation) -> float:
        """What one consumer drains: measured when the observation carries it."""
        return observation.capacity if observation.capacity is not None else self.config.capacity

    def _recent_peak(self) -> int:
        """The highest target of the last quarter of the scale-down window."""
        return max(t for _, t in self._lower)

    def _scale_up_wait(self, now: float, observation: Observation, current: int) -> str | None:
        """Why a scale-up waits now (consumers failing to join, one rebalance at a time, the
        step still measuring); None: it does not."""
        if observation.join_problem is not None:
            return observation.join_problem
        if self._joining(now, observation, current):
            return (
                f"scaled up {now - (self._scaled_up_at or now):.0f} s ago to {current}, and "
                f"the group has not taken that in yet ({observation.group_members} member(s), "
                f"{'stable' if observation.group_stable else 'rebalancing'}; at most "
                f"{GROUP_SETTLE_LIMIT_S:.0f} s)"
            )
        if self._rebalancing(now):
            return (
                f"the group has been rebalancing for "
                f"{now - (self._rebalancing_since or now):.0f} s (a member joining, leaving or "
                f"asking for a re-plan): one round at a time, at most "
                f"{GROUP_SETTLE_LIMIT_S:.0f} s"
            )
        if self._settling(now):
            return (
                f"scaled up {now - (self._scaled_up_at or now):.0f} s ago, and the speeds are "
                f"still measuring that step (one more decision after "
                f"{self.config.scale_up_settle_s:.0f} s)"
            )
        return None

    def _settling(self, now: float) -> bool:
        """Whether a scale-up happened less than ``scale_up_settle_s`` ago."""
        since = self._scaled_up_at
        return since is not None and now - since < self.config.scale_up_settle_s

    def _rebalancing(self, now: float) -> bool:
        """Whether the group is rebalancing, for less than ``GROUP_SETTLE_LIMIT_S`` so far
        (a group that never settles, a member crashing again and again, must still grow)."""
        since = self._rebalancing_since
        return since is not None and now - since < GROUP_SETTLE_LIMIT_S

    def _joining(self, now: float, observation: Observation, current: int) -> bool:
        """Whether the last scale-up (less than ``GROUP_SETTLE_LIMIT_S`` ago) has not yet
        shown in the group: rebalancing, fewer members than ``current``, or, where members
        report, fewer than ``current`` seen committing. A member that has joined has not read
        yet: the backlog built while it started is not drained by more consumers (measured
        on Apache Kafka: a scale-up 0.7 s after the group formed, for the 26,555 records of
        its start-up, that the two members wrote within 2 s)."""
        since = self._scaled_up_at
        if since is None or now - since >= GROUP_SETTLE_LIMIT_S:
            return False
        if observation.group_holds(current) is False:
            return True
        reading = observation.reading_members or 0
        return observation.members_report and bool(observation.group_members) and reading < current

    def _reverses_scale_down(self, now: float, observation: Observation, current: int) -> bool:
        """Whether scaling up now would undo a recent scale-down while the arrival speeds
        alone still fit the consumers there are."""
        since = self._scaled_down_at
        if since is None or now - since >= self.config.scale_down_window_s:
            return False
        capacity = self._capacity(observation)
        if self.config.group_type == "share":
            return share_demand(observation.speeds, capacity) <= current
        heuristic = get_heuristic(self.config.heuristic)
        packed = heuristic.assign(observation.speeds, capacity=capacity)
        needed = bins_used(packed) if any(observation.speeds.values()) else 0
        return needed <= current

    def _member_cap(self, observation: Observation) -> int:
        """The most members that can be at work: the partition count for a consumer group;
        for a share group, the broker's cap (or none)."""
        if self.config.group_type == "share":
            return observation.max_members or self.config.max_replicas
        return len(observation.speeds)

    def _plan(self, observation: Observation) -> tuple[Assignment, int, float]:
        rule = self.config.drain_rule
        effective = rule.effective_speeds(observation.speeds, observation.lags)
        backlog = rule.total_backlog(observation.speeds, observation.lags)
        if self.config.group_type == "share":
            # No partition plan: the broker's share assignor splits partitions by load.
            return {}, share_demand(effective, self._capacity(observation)), backlog
        heuristic = get_heuristic(self.config.heuristic)
        previous = {tp: c for tp, c in self.plan.items() if tp in effective}
        capacity = self._capacity(observation)
        racks = observation.partition_racks
        if racks is not None and self.config.heuristic == RACK_AWARE_BASE:
            layout = RackLayout(racks, self.plan_racks)
            rack_plan = RackAwareRepair().plan(
                effective, capacity=capacity, layout=layout, previous=previous
            )
            plan, self.plan_racks = rack_plan.assignment, rack_plan.consumer_racks
            self.rack_note = rack_plan.fallback
        else:
            plan = heuristic.assign(effective, capacity=capacity, previous=previous)
        # Nothing written and nothing owed: no consumer is needed (min_replicas decides).
        demand = bins_used(plan) if any(effective.values()) else 0
        return plan, demand, backlog


def share_demand(loads: Mapping[TopicPartition, float], capacity: float) -> int:
    """Members a share group needs: its load over one consumer's capacity, rounded up (members
    share partitions, so no partition is an indivisible item); 0 when nothing is written."""
    total = sum(loads.values())
    return math.ceil(total / capacity - 1e-9) if total > 0 else 0


def _moved(before: float | None, now: float) -> bool:
    """Whether a capacity moved by ``CAPACITY_MOVED`` or more either way (None: never)."""
    return before is not None and max(before, now) >= CAPACITY_MOVED * min(before, now)
