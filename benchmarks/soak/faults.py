"""The soak's faults and their seeded schedule (pure: no process is touched here)."""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass


class FaultKind(enum.Enum):
    """What the soak does to the system, and for how long (seconds, drawn per fault)."""

    CONSUMER_KILL = "kill -9 of a consumer"
    BROKER_KILL = "kill -9 of a broker, restarted"
    SIDECAR_KILL = "kill -9 of the sidecar, restarted"
    SPARK_KILL = "kill -9 of the Spark Connect server, restarted"
    NETWORK_CUT = "a consumer cut from the network"
    ZOMBIE = "a consumer stopped (SIGSTOP) past its session, resumed"
    DISK_FULL = "the warehouse's disk full"

    def duration_range(self, session_s: float) -> tuple[float, float]:
        """How long the fault lasts before its repair (a kill of a consumer: its restart is
        the scaler's business, not the soak's)."""
        return {
            FaultKind.CONSUMER_KILL: (0.0, 0.0),
            FaultKind.BROKER_KILL: (20.0, 40.0),
            FaultKind.SIDECAR_KILL: (5.0, 15.0),
            FaultKind.SPARK_KILL: (5.0, 15.0),
            FaultKind.NETWORK_CUT: (30.0, 60.0),
            FaultKind.ZOMBIE: (session_s + 5.0, session_s + 15.0),
            FaultKind.DISK_FULL: (30.0, 30.0),
        }[self]


@dataclass(frozen=True)
class PlannedFault:
    """One fault of the schedule: when it starts (seconds from the load's start), what,
    for how long."""

    at: float
    kind: FaultKind
    duration: float


def schedule(
    seed: int,
    start_s: float,
    end_s: float,
    kinds: tuple[FaultKind, ...],
    *,
    every: tuple[float, float] = (45.0, 90.0),
    settle_s: float = 15.0,
    session_s: float = 6.0,
) -> list[PlannedFault]:
    """Faults from ``start_s`` until ``end_s``: one every ``every`` seconds (uniform), never
    before the previous one was repaired plus ``settle_s``. Kinds come in shuffled rounds
    of all ``kinds``, so each occurs as often as the others, give or take one."""
    rng = random.Random(seed)
    planned: list[PlannedFault] = []
    at = start_s
    round_left: list[FaultKind] = []
    while True:
        if not round_left:
            round_left = list(kinds)
            rng.shuffle(round_left)
        kind = round_left.pop()
        low, high = kind.duration_range(session_s)
        duration = rng.uniform(low, high)
        if at + duration > end_s:
            return planned
        planned.append(PlannedFault(at, kind, duration))
        at = max(at + rng.uniform(*every), at + duration + settle_s)


def delayed_start(planned_at: float, shift: float, judged_at: float | None) -> float:
    """When a planned fault starts: its planned time moved by ``shift`` (the delay of the
    faults before it), and never before the fault before it was judged (``judged_at``: its
    lag back under the steady state, or the recovery target's end; None: nothing to wait
    for). A fault that began while the last one's lag was still coming back left that
    recovery unknown: 7 of the first hour's 51 faults were."""
    start = planned_at + shift
    return start if judged_at is None else max(start, judged_at)
