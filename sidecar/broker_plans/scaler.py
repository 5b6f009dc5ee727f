"""A scaler that removes a KIP-848 member only once the plan has emptied it: a member
stopped while it reads would pause its partitions until the coordinator notices it left
(its session timeout, for a static member); one emptied first hands them over at once."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sidecar.broker_plans.planner import BrokerPlanner
from sidecar.join_watch import MemberFailure
from sidecar.scalers.base import Scaler

log = logging.getLogger(__name__)

EMPTY_WITHIN_S = 60.0  # then the member is stopped all the same (the broker may lack our assignor)


class EmptyFirstScaler:
    """Wraps the scaler of a KIP-848 group: a scale-down waits until the members it removes
    read nothing (what :class:`BrokerPlanner` saw), a scale-up goes through at once."""

    def __init__(
        self,
        inner: Scaler,
        planner: BrokerPlanner,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner, self.planner, self.clock = inner, planner, clock
        self._pending: tuple[int, float] | None = None  # replicas, asked at

    def replicas(self) -> int:
        """The replicas asked for while members are being emptied; the inner scaler's else.
        A pending scale-down whose members are empty (or overdue) is applied here."""
        if self._pending is not None:
            replicas, asked = self._pending
            waiting = self.planner.unemptied()
            overdue = self.clock() - asked >= EMPTY_WITHIN_S
            if not waiting or overdue:
                if waiting:
                    log.warning(
                        "%s still read after %.0f s; stopped all the same",
                        ", ".join(waiting),
                        EMPTY_WITHIN_S,
                    )
                self._pending = None
                self.inner.scale(replicas)
            else:
                return replicas
        return self.inner.replicas()

    def scale(self, replicas: int) -> None:
        """Scale up now; scale down once the members removed read nothing."""
        if replicas < self.inner.replicas():
            self._pending = (replicas, self.clock())
        else:
            self._pending = None
            self.inner.scale(replicas)

    def problems(self) -> list[str]:
        """The inner scaler's, and the planner's."""
        lines = self.inner.problems()
        for line in (self.planner.assignor_problem, self.planner.problem):
            if line:
                lines.append(line)
        return lines

    def failing_members(self) -> list[MemberFailure]:
        """The inner scaler's, and, while the brokers lack the assignor the members name,
        every wanted member not in the group: it cannot join (its heartbeat is refused)."""
        failures = self.inner.failing_members()
        problem = self.planner.assignor_problem
        if problem:
            named = {failure.member for failure in failures} | set(self.planner.members())
            wanted = self.planner.wanted(self.inner.replicas())
            failures += [MemberFailure(m, problem) for m in wanted if m not in named]
        return failures

    def member_words(self) -> list[MemberFailure]:
        """The inner scaler's."""
        return self.inner.member_words()

    def close(self) -> None:
        """Close the inner scaler; the planner's control member leaves."""
        self.planner.stop()
        self.inner.close()
