"""The sidecar's planner for a KIP-848 group: once a round (leader only) it describes the
group, plans for the members the sidecar wants, publishes the plan when it changed (and again
before the brokers would find it stale), and kicks the coordinator when every wanted member is
in the group but the group does not read as planned (the speeds drifted, or a member is to be
emptied). A scale-up needs no kick: the new member's join makes the coordinator assign."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from assignor.broker import CONTROL_INSTANCE_PREFIX
from assignor.group_plan import SpeedView
from assignor.types import TopicPartition
from contract.broker_plans import PLANS_TOPIC, encode_plan, plans_topic_for
from sidecar.broker_plans.control import ControlMembers
from sidecar.broker_plans.group import (
    DescribedGroup,
    assignor_problem,
    broker_assignors,
    describe_group,
    topic_ids,
)
from sidecar.broker_plans.planning import BrokerPlan, holds, plan_members, still_reading
from sidecar.monitor import Reading

log = logging.getLogger(__name__)

REPUBLISH_S = 60.0  # well inside the brokers' autoscaler.plans.max.age.ms (600 s by default)
KICK_EVERY_S = 5.0  # a kick is one assignment round; give it time to show in a describe
REQUEST_TIMEOUT_S = 10.0


class BrokerPlanner:
    """See the module docstring. ``identity(ordinal)``: the ``group.instance.id`` of the
    scaler's replica ``ordinal``; ``client_options``: librdkafka properties every client of
    the planner connects with (``contract.security.librdkafka_options``); ``plans_topic``:
    the brokers' ``autoscaler.plans.topic``, this group's plans going to
    ``<plans_topic>.<group>``."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: list[str],
        *,
        heuristic: str,
        identity: Callable[[int], str],
        plans_topic: str = PLANS_TOPIC,
        client_options: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bootstrap, self.group = bootstrap, group
        self.heuristic, self.identity = heuristic, identity
        self.plans_topic, self.clock = plans_topic_for(group, plans_topic), clock
        self.client_options = dict(client_options or {})
        self.controls = ControlMembers(bootstrap, group, topics, self.client_options)
        self.described: DescribedGroup | None = None
        self.plan: BrokerPlan | None = None
        self.problem: str | None = None
        self.assignor_problem: str | None = None
        self.published = 0
        self._published_at: float | None = None
        self._published: dict[str, frozenset[TopicPartition]] | None = None
        self._kicked_at: float | None = None
        self._topic_ids: dict[str, str] = {}
        self._admin: Any = None
        self._producer: Any = None

    def start(self) -> None:
        """Connect (blocking) and check once that the brokers load our assignor (the
        sidecar creates the plans topic as it does its other topics)."""
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        connect = {**self.client_options, "bootstrap.servers": self.bootstrap}
        self._admin = AdminClient(connect)
        self._producer = Producer({**connect, "linger.ms": 0})
        self.assignor_problem = assignor_problem(broker_assignors(self._admin, REQUEST_TIMEOUT_S))
        if self.assignor_problem is not None:
            log.error("%s", self.assignor_problem)

    def stop(self) -> None:
        """Have the control member leave; flush what was published."""
        self.controls.release()
        if self._producer is not None:
            self._producer.flush(REQUEST_TIMEOUT_S)

    def members(self, *, targets: bool = False) -> dict[str, frozenset[TopicPartition]]:
        """The group's members but the control ones, and what each reads (``targets``: what
        the last assignment gave each) as last described."""
        described = self.described
        owned = {} if described is None else described.targets if targets else described.owned
        return {m: tps for m, tps in owned.items() if not m.startswith(CONTROL_INSTANCE_PREFIX)}

    def describe_into(self, reading: Reading) -> None:
        """Give ``reading`` the group's state and members from the last ConsumerGroupDescribe:
        the monitor's DescribeGroups (the classic protocol's) finds a KIP-848 group "Dead"."""
        if self.described is not None:
            # librdkafka names KIP-848's assigning and reconciling states "unknown": the group
            # is stable when every member reads what the coordinator last assigned it.
            settled = self.members() == self.members(targets=True)
            reading.group_state = "Stable" if settled else "Reconciling"
            reading.member_ids = frozenset(self.members())

    def wanted(self, replicas: int) -> list[str]:
        """The members a group of ``replicas`` consists of."""
        return [self.identity(ordinal) for ordinal in range(replicas)]

    def status(self) -> dict[str, Any]:
        """What /status shows of the plans."""
        return {
            "topic": self.plans_topic,
            "published": self.published,
            "kicks": self.controls.kicks,
            "plan": None
            if self.plan is None
            else {
                member: sorted(f"{tp.topic}:{tp.partition}" for tp in tps)
                for member, tps in self.plan.by_member().items()
            },
            "holds": None if self.plan is None else holds(self.plan, self.members()),
            "being_emptied": self.unemptied(),
            "problems": [p for p in (self.assignor_problem, self.problem) if p],
        }

    def unemptied(self) -> list[str]:
        """Members the last plan gives nothing that still read some partition."""
        return still_reading(self.plan, self.members()) if self.plan is not None else []

    async def step(
        self,
        replicas: int,
        partitions: Mapping[str, set[int]],
        view: SpeedView | None,
        capacity: float,
    ) -> None:
        """One round: see the module docstring (blocking calls go to a thread)."""
        try:
            await asyncio.to_thread(self._step, replicas, partitions, view, capacity)
            self.problem = None
        except Exception as exc:  # a round that fails leaves the last plan in force
            self.problem = f"KIP-848 plan not published this round: {exc}"
            log.warning("%s", self.problem)

    def _step(
        self,
        replicas: int,
        partitions: Mapping[str, set[int]],
        view: SpeedView | None,
        capacity: float,
    ) -> None:
        if self._admin is None:
            self.start()
        self.described = describe_group(self._admin, self.group, REQUEST_TIMEOUT_S)
        present = self.members()
        wanted = self.wanted(replicas)
        if not wanted or not partitions:
            return
        self.plan = plan_members(
            wanted, present, partitions, view, capacity=capacity, heuristic=self.heuristic
        )
        now = self.clock()
        targets = self.plan.by_member()
        stale = self._published_at is None or now - self._published_at >= REPUBLISH_S
        if targets != self._published or stale:
            self._publish(self.plan, partitions)
            self._published, self._published_at = targets, now
        # Kick only when the coordinator's own target is not the plan: members still
        # reconciling towards it need no new assignment.
        if holds(self.plan, present):
            self.controls.release()
        elif (
            set(wanted) <= set(present)
            and not holds(self.plan, self.members(targets=True))
            and (self._kicked_at is None or now - self._kicked_at >= KICK_EVERY_S)
        ):
            log.info("the group does not read as planned: %s joins", self.controls.kick())
            self._kicked_at = now

    def _publish(self, plan: BrokerPlan, partitions: Mapping[str, set[int]]) -> None:
        missing = [t for t in partitions if t not in self._topic_ids]
        if missing:
            self._topic_ids.update(topic_ids(self._admin, missing, REQUEST_TIMEOUT_S))
        key, value = encode_plan(
            self.group,
            plan.assignment,
            plan.members,
            self._topic_ids,
            written_ms=int(time.time() * 1000),
        )
        self._producer.produce(self.plans_topic, value=value, key=key)
        if self._producer.flush(REQUEST_TIMEOUT_S) != 0:
            raise TimeoutError(f"the plan was not written to {self.plans_topic} in time")
        self.published += 1
