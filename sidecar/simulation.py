"""A discrete-time simulator of a consumer group under a scaling policy (pure, seeded).

Each second: partitions receive records at their trace's rates; every consumer drains at
most C records/s, spread over its partitions in proportion to their backlog; partitions
that moved in a rebalance pause for ``rebalance_s`` (an eager rebalance pauses them all).
Every ``interval_s`` the policy sees measured speeds (the arrivals averaged over a window,
as the monitor measures them) and lags, and picks a replica count; a change of count is a
rebalance, with the policy's assignment. Our policy drives the real controller and
heuristic with a fake clock.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from assignor import Assignment, TopicPartition, get_heuristic
from assignor.metrics import consumer_loads, rscore
from contract.overload import OverloadWatch
from sidecar.controller import Controller, ControllerConfig, Observation
from sidecar.keda import KedaRule

Rates = Callable[[int], np.ndarray]
"""Trace: second -> records/s of every partition."""

Uncommitted = float | Callable[[int, float], float]
"""Seconds of arrivals read but not yet committed: a constant, or (second, the consumers'
utilisation: arrivals / (consumers x capacity)) -> seconds."""


def random_walk(partitions: int, capacity: float, delta: float, seed: int) -> Rates:
    """The paper's walk (docs/architecture.md section 1), per second, scaled so the load needs about
    ``partitions / 4`` consumers on average."""
    rng = np.random.default_rng(seed)
    top = capacity / 2
    current = rng.uniform(0, top, partitions)
    last = -1

    def rates(t: int) -> np.ndarray:
        nonlocal current, last
        while last < t:
            current = np.clip(current + rng.uniform(-delta, delta, partitions) / 100 * top, 0, top)
            last += 1
        return current

    return rates


def diurnal(partitions: int, capacity: float, period_s: int, seed: int) -> Rates:
    """A daily curve (compressed into ``period_s``) with per-partition noise."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.05, 0.45, partitions) * capacity

    def rates(t: int) -> np.ndarray:
        wave = 0.55 + 0.45 * math.sin(2 * math.pi * t / period_s)
        return np.asarray(base * wave * rng.uniform(0.9, 1.1, partitions))

    return rates


def spikes(partitions: int, capacity: float, seed: int) -> Rates:
    """Steady load with a 5x spike on a random quarter of the partitions for 60 s, every
    ~10 minutes."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.05, 0.25, partitions) * capacity
    hot = rng.random((1000, partitions)) < 0.25

    def rates(t: int) -> np.ndarray:
        spike = (t % 600) < 60
        return np.asarray(base * np.where(hot[t // 600 % 1000] & spike, 5.0, 1.0))

    return rates


def bursty(partitions: int, capacity: float, seed: int) -> Rates:
    """On/off sources with heavy-tailed on and off periods (Pareto), like real producers."""
    rng = np.random.default_rng(seed)
    peak = rng.uniform(0.1, 0.6, partitions) * capacity
    on = rng.random(partitions) < 0.5
    until = rng.pareto(1.5, partitions) * 20
    last = 0

    def rates(t: int) -> np.ndarray:
        nonlocal on, until, last
        while last < t:
            last += 1
            flip = until <= last
            on = np.where(flip, ~on, on)
            until = np.where(flip, last + 5 + rng.pareto(1.5, partitions) * 20, until)
        return np.asarray(np.where(on, peak, peak * 0.05))

    return rates


class Policy:
    """Decides the replica count and the assignment."""

    name = "policy"
    cooperative = True

    def replicas(
        self,
        t: float,
        speeds: dict[TopicPartition, float],
        lags: dict[TopicPartition, float],
        current: int,
    ) -> int:
        raise NotImplementedError

    def assign(
        self,
        speeds: dict[TopicPartition, float],
        previous: Assignment,
        members: Sequence[str],
        capacity: float,
    ) -> Assignment:
        raise NotImplementedError

    def wants_replan(
        self, t: float, speeds: dict[TopicPartition, float], assignment: Assignment
    ) -> bool:
        """Whether to rebalance with the same members (default: never)."""
        return False


class OurPolicy(Policy):
    """The sidecar's controller and the group's heuristic (cooperative rebalancing); with
    ``replan``, each member asks for a re-plan when it stays overloaded
    (contract.overload, as the SDK does). The assignor packs the speeds plus backlog by
    the controller's drain rule, as the SDK's assignor does with the snapshot's ``drain``.
    ``lag_allowance_s`` is the consumers' batch wait (``wait_time_secs``): lag up to that
    many seconds of arrivals is a batch in the making, not a backlog."""

    def __init__(
        self,
        heuristic: str,
        capacity: float,
        partitions: int,
        scale_down_window_s: float = 120,
        drain_seconds: float = 30,
        replan: bool = True,
        lag_allowance_s: float = 0.0,
    ) -> None:
        self.name = f"ours ({heuristic})"
        self.capacity = capacity
        self.replan = replan
        self.watches: dict[str, OverloadWatch] = {}
        self.heuristic = get_heuristic(heuristic)
        self.now = 0.0
        self.lags: dict[TopicPartition, float] = {}
        self.controller = Controller(
            ControllerConfig(
                capacity=capacity,
                heuristic=heuristic,
                max_replicas=partitions,
                scale_down_window_s=scale_down_window_s,
                drain_seconds=drain_seconds,
                lag_allowance_s=lag_allowance_s,
                max_data_age_s=1e9,
            ),
            lambda: self.now,
        )
        self.controller.synchronise(1)

    def replicas(
        self,
        t: float,
        speeds: dict[TopicPartition, float],
        lags: dict[TopicPartition, float],
        current: int,
    ) -> int:
        self.now = t
        self.lags = lags
        if self.controller.replicas != current:
            self.controller.synchronise(current)
        return self.controller.step(Observation(t, speeds, lags)).desired

    def wants_replan(
        self, t: float, speeds: dict[TopicPartition, float], assignment: Assignment
    ) -> bool:
        if not self.replan:
            return False
        asks = False
        for member, load in sorted(consumer_loads(assignment, speeds).items()):
            watch = self.watches.setdefault(member, OverloadWatch(self.capacity))
            if watch.observe(t, load):
                watch.asked(t)
                asks = True
        return asks

    def assign(
        self,
        speeds: dict[TopicPartition, float],
        previous: Assignment,
        members: Sequence[str],
        capacity: float,
    ) -> Assignment:
        return self.heuristic.assign(
            self.controller.config.drain_rule.effective_speeds(speeds, self.lags),
            capacity=capacity,
            previous=previous,
            members=members,
            remove_first=list(reversed(members)),
        )


class KedaPolicy(Policy):
    """KEDA's Kafka scaler through the HPA (:class:`~sidecar.keda.KedaRule`: ceil(total lag
    / lagThreshold) every 15 s with the HPA's default ramp, tolerance and stabilisation,
    capped at the partition count); the group's assignment is eager range or
    cooperative-sticky."""

    def __init__(self, lag_threshold: float, partitions: int, cooperative: bool) -> None:
        self.lag_threshold = lag_threshold
        self.partitions = partitions
        self.cooperative = cooperative
        self.name = f"keda {'coop-sticky' if cooperative else 'eager-range'} lag={lag_threshold:g}"
        self.rule = KedaRule(lag_threshold)

    def replicas(
        self,
        t: float,
        speeds: dict[TopicPartition, float],
        lags: dict[TopicPartition, float],
        current: int,
    ) -> int:
        return self.rule.desired(t, sum(lags.values()), current, self.partitions)

    def assign(
        self,
        speeds: dict[TopicPartition, float],
        previous: Assignment,
        members: Sequence[str],
        capacity: float,
    ) -> Assignment:
        if self.cooperative:
            return get_heuristic("sticky").assign(
                speeds, capacity=capacity, previous=previous, members=members
            )
        ordered = sorted(speeds)  # range: contiguous blocks per member
        per = math.ceil(len(ordered) / len(members))
        return {tp: members[i // per] for i, tp in enumerate(ordered)}


@dataclass
class Result:
    """What one run cost and how late it was."""

    policy: str
    consumer_seconds: float
    lag_p50: float
    lag_p99: float
    lag_max: float
    lag_seconds_p50: float
    lag_seconds_p99: float
    lag_seconds_max: float
    rebalances: int
    total_rscore: float
    paused_partition_seconds: float
    replicas: list[int] = field(default_factory=list, repr=False)
    lag: list[float] = field(default_factory=list, repr=False)


def dominates(a: Result, b: Result) -> bool:
    """Whether run ``a`` is no worse than run ``b`` on consumer-seconds and on p99 lag in
    seconds, and better on at least one."""
    return point_dominates(
        (a.lag_seconds_p99, a.consumer_seconds), (b.lag_seconds_p99, b.consumer_seconds)
    )


def point_dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether ``a`` (lateness, cost) is no worse than ``b`` on both and better on one."""
    return a[0] <= b[0] and a[1] <= b[1] and a != b


def frontier_cost(results: Sequence[Result], p99_s: float) -> float | None:
    """The fewest consumer-seconds ``results`` (one policy's settings on one trace) spend at
    a p99 lag of ``p99_s`` seconds (see :func:`frontier_at`)."""
    return frontier_at([(r.lag_seconds_p99, r.consumer_seconds) for r in results], p99_s)


def frontier_at(points: Sequence[tuple[float, float]], late: float) -> float | None:
    """The least cost of ``points`` (lateness, cost; one policy's settings) at lateness
    ``late``: linear between neighbouring settings on their cost / lateness frontier, the
    cheapest setting's beyond it; None where every setting is later."""
    frontier: list[tuple[float, float]] = []
    for point_late, cost in sorted(points):
        if not frontier or cost < frontier[-1][1]:
            frontier.append((point_late, cost))  # later settings must be cheaper to be on it
    if not frontier or late < frontier[0][0]:
        return None
    for (late0, cost0), (late1, cost1) in itertools.pairwise(frontier):
        if late0 <= late <= late1:
            return cost0 + (cost1 - cost0) * (late - late0) / (late1 - late0)
    return frontier[-1][1]


def oracle_consumer_seconds(
    rates: Rates, capacity: float, duration_s: int, start_s: int = 0
) -> float:
    """The physical limit: every second from ``start_s``, the fewest consumers that could hold
    the total arrival rate (ceil(total speed / capacity), the bin-packing lower bound), summed."""
    if not capacity > 0:
        raise ValueError(f"capacity must be > 0, got {capacity!r}")
    # Every second is drawn, in order: some traces draw their noise as they are called.
    needed = [math.ceil(float(rates(t).sum()) / capacity) for t in range(duration_s)]
    return float(sum(needed[start_s:]))


def work_consumer_seconds(rates: Rates, capacity: float, duration_s: int) -> float:
    """All the trace's records / capacity: what consumers draining at most ``capacity`` each
    must spend, whatever lag they allow (at most the oracle, which allows none)."""
    if not capacity > 0:
        raise ValueError(f"capacity must be > 0, got {capacity!r}")
    return sum(float(rates(t).sum()) for t in range(duration_s)) / capacity


def simulate(
    rates: Rates,
    partitions: int,
    capacity: float,
    policy: Policy,
    duration_s: int,
    *,
    rebalance_s: float = 3.0,
    window_s: int = 30,
    interval_s: int = 1,
    warm_up_s: int = 0,
    uncommitted_s: Uncommitted = 0.0,
    startup_s: float | None = None,
    cold_start_s: float = 0.0,
) -> Result:
    """Run ``policy`` against the trace for ``duration_s`` seconds; what it cost and how late
    it was are counted from ``warm_up_s`` on (every policy starts from one consumer).

    Simulated consumers drain as they read; ``uncommitted_s`` seconds of each partition's
    arrivals are added to the lag the policy sees, as records read but not yet committed (a
    batch being built: lag as the group's committed offsets show it); a callable gives them
    second by second from the consumers' utilisation (a measured spread). The lag figures
    of the result are what is not yet read. A partition moved pauses ``rebalance_s``; one
    given to a consumer just added, ``startup_s`` (its process starting and joining;
    ``rebalance_s`` when None), while the new consumer is paid for from the decision on. The
    first consumer reads from ``cold_start_s`` on (a group deployed from nothing)."""
    if not 0 <= warm_up_s < duration_s:
        raise ValueError(f"warm_up_s must be in [0, duration_s), got {warm_up_s!r}")
    if startup_s is not None and not (math.isfinite(startup_s) and startup_s >= 0):
        raise ValueError(f"startup_s must be a finite number >= 0, got {startup_s!r}")
    if not (math.isfinite(cold_start_s) and 0 <= cold_start_s < duration_s):
        raise ValueError(f"cold_start_s must be in [0, duration_s), got {cold_start_s!r}")
    unread_s = uncommitted_s if callable(uncommitted_s) else lambda _t, _u: uncommitted_s
    joining_s = rebalance_s if startup_s is None else startup_s
    tps = [TopicPartition("t", p) for p in range(partitions)]
    lag = np.zeros(partitions)
    paused_until = np.full(partitions, cold_start_s)
    window: deque[np.ndarray] = deque(maxlen=window_s)
    members = ["m0"]
    ready_at = np.full(1, cold_start_s)  # when each member can first read
    owner = np.zeros(partitions, dtype=int)
    assignment: Assignment = dict.fromkeys(tps, "m0")
    replicas_seen, lag_seen, lag_secs = [], [], []
    consumer_seconds = paused = total_rscore = 0.0
    rebalances = 0
    for t in range(duration_s):
        arrivals = rates(t)
        window.append(arrivals)
        lag += arrivals
        active = paused_until <= t
        counted = t >= warm_up_s
        paused += float(np.count_nonzero(~active)) * counted
        demand = np.where(active, lag, 0.0)
        per_member = np.bincount(owner, weights=demand, minlength=len(members))
        share = np.where(per_member > capacity, capacity / np.maximum(per_member, 1e-12), 1.0)
        lag -= demand * share[owner]
        consumer_seconds += len(members) * counted
        total_lag = float(lag.sum())
        replicas_seen.append(len(members))
        lag_seen.append(total_lag)
        lag_secs.append(total_lag / max(float(arrivals.sum()), 1e-9))
        if t % interval_s or t < 3:
            continue
        measured = np.mean(np.asarray(window), axis=0)
        speeds = {tp: float(s) for tp, s in zip(tps, measured, strict=True)}
        utilisation = float(arrivals.sum()) / (len(members) * capacity)
        seen = lag + arrivals * unread_s(t, utilisation)
        lags = {tp: float(v) for tp, v in zip(tps, seen, strict=True)}
        desired = policy.replicas(float(t), speeds, lags, len(members))
        replan = desired == len(members) and policy.wants_replan(float(t), speeds, assignment)
        if (desired == len(members) and not replan) or desired < 1:
            continue
        kept = len(members)
        members = [f"m{i}" for i in range(desired)]
        ready_at = np.concatenate(
            [ready_at[: min(kept, desired)], np.full(max(0, desired - kept), t + 1 + joining_s)]
        )
        new = policy.assign(speeds, assignment, members, capacity)
        moved = np.array([new[tp] != assignment.get(tp) for tp in tps])
        pause = moved if policy.cooperative else np.ones(partitions, dtype=bool)
        index = {m: i for i, m in enumerate(members)}
        until = np.maximum(t + 1 + rebalance_s, ready_at[[index[new[tp]] for tp in tps]])
        paused_until = np.where(pause, until, paused_until)
        total_rscore += rscore(assignment, new, speeds, capacity) * counted
        rebalances += counted
        assignment = new
        owner = np.array([index[assignment[tp]] for tp in tps])
    lags_arr, secs_arr = np.array(lag_seen[warm_up_s:]), np.array(lag_secs[warm_up_s:])
    return Result(
        policy.name,
        consumer_seconds,
        float(np.percentile(lags_arr, 50)),
        float(np.percentile(lags_arr, 99)),
        float(lags_arr.max()),
        float(np.percentile(secs_arr, 50)),
        float(np.percentile(secs_arr, 99)),
        float(secs_arr.max()),
        rebalances,
        total_rscore,
        paused,
        replicas_seen,
        lag_seen,
    )
