"""Cooperative rebalancing on aiokafka's eager coordinator (KIP-429 semantics, member side).

aiokafka's ``GroupCoordinator`` revokes every partition before each rejoin, so any scale
event stops the whole group. :class:`CooperativeCoordinator` changes the two steps around
the join and nothing else:

* before joining: nothing is revoked, the fetcher keeps running, the member keeps reading
  (and writing) its partitions and tells the leader it still holds them (user_data);
* after joining: heartbeats start again at once, before the callbacks (aiokafka waits
  until they return); only the partitions missing from the new assignment are revoked (the
  listener flushes and commits those alone), retained partitions keep their fetch
  positions, the listener hears only of the added ones. In a one-round hand-over (the
  default: :func:`assignor.cooperative.give_moving`) that is all: a lost partition's commit
  marks it released and its new owner, given it in the same round, reads on from there
  (:mod:`consumer_sdk.pipeline.resume`). When the leader withheld partitions instead (the
  assignment says so) every member rejoins for the next round, which hands them over, at
  once, without waiting for its heartbeat to hear of it (:mod:`assignor.cooperative`);
* as the leader of a round that withholds partitions and gives none: its SyncGroup waits until
  ``LEADER_SYNC_GRACE_S`` after the JoinGroup answer (:func:`leader_sync_wait`), so every
  follower's SyncGroup is already waiting at the coordinator and all members get their
  assignment in the same instant. The wait falls before anyone revokes (members keep reading
  what they hold meanwhile), so it adds nothing to a moved partition's pause.

A member shutting down rejoins once more, saying it is leaving (see
:mod:`assignor.cooperative`): it reads on until the leader's plan takes its partitions away,
revokes them, and the consumer leaves the group at once (:meth:`AutoscalingConsumer.close`).

A round is eager when the group is (a member without cooperative support is present, per
the leader's assignment) or when this member lost its generation (it was dropped from the
group: its partitions may already be someone else's). Those partitions are *lost*, not
revoked (Kafka's ``onPartitionsLost``): the moment the coordinator refuses the member's id
or generation, the listener drops them without writing or committing anything of them, and
the member joins again claiming nothing, even when the refusal came in the middle of a
cooperative rejoin that had claimed them. Offsets are not committed while a
cooperative rejoin is in flight (``rejoining``); brokers reject them mid-rebalance and the
consumer commits them with the next batch.

Written against aiokafka 0.14 (pinned); ``tests/test_aiokafka_pin.py`` checks the internals
used here. The class is attached to a started consumer's coordinator with
:func:`make_cooperative`: aiokafka builds its coordinator inside ``start()``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.coordinator.protocol import ConsumerProtocol
from aiokafka.protocol.commit import OffsetCommitRequest
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from assignor.cooperative import COOPERATIVE
from assignor.plugin import MemberState
from consumer_sdk import metrics
from consumer_sdk.kafka_client import group

log = logging.getLogger(__name__)
REJOIN_RETRY_MS = 10
# A JoinGroup sent while other members' SyncGroup requests are still on their way starts the
# next round, and the coordinator refuses those syncs: their members miss this round's
# assignment (a leaving member keeps its partitions), and every miss costs the group another
# round. Measured on Apache Kafka with six members on two cores: a scale-down 6 -> 2 took four
# generations with only 2 of 6 syncs answered in the first two. The coordinator holds a
# follower's SyncGroup until the leader's arrives, so the leader of a hand-over round waits
# this long after the JoinGroup answer: every member's sync is then answered at once, and
# the members can rejoin at once. Half a second covers a busy member's sync on two cores.
LEADER_SYNC_GRACE_S = 0.5


def leader_sync_wait(hold: bool, elapsed_s: float, grace_s: float = LEADER_SYNC_GRACE_S) -> float:
    """How long the leader still holds its SyncGroup back, ``elapsed_s`` after the JoinGroup
    answer (the assignment took that long): the rest of ``grace_s`` when the round holds it
    back (it withholds partitions and gives none: :func:`assignor.cooperative.holds_sync_back`),
    nothing otherwise."""
    if not hold:
        return 0.0
    return max(0.0, grace_s - elapsed_s)


class CooperativeCoordinator(GroupCoordinator):
    """aiokafka's group coordinator with cooperative join steps; see the module doc."""

    autoscaler_state: MemberState
    rejoining: bool
    eager_round: bool
    # Partitions lost with the membership and not yet assigned again, and the listener's
    # on_partitions_lost for them while it runs.
    lost: set[KafkaTopicPartition]
    losing: asyncio.Task[None] | None

    def reset_generation(self) -> None:
        # Called when the coordinator refused our member id or generation (we were evicted,
        # or a round ended without us), and once more after LeaveGroup when closing.
        if self.generation > 0 and not self._closing.done():
            metrics.MEMBERSHIP_LOST.labels(self.group_id).inc()
            self._lose_assignment()
        super().reset_generation()

    def _lose_assignment(self) -> None:
        """The group may have given this member's partitions to others already (Kafka's
        partitions lost): the listener drops them at once (``on_partitions_lost``), and the
        member rejoins as a new one owning nothing; the join in flight, if any, completes
        as an eager one (everything it gives is new to the member)."""
        state = self.autoscaler_state
        state.holding = False
        state.owned = ()
        state.awaiting = frozenset()
        state.generation = OffsetCommitRequest.DEFAULT_GENERATION_ID
        self.eager_round = True
        subscription = self._subscription.subscription
        assignment = subscription.assignment if subscription is not None else None
        newly = set(assignment.tps) - self.lost if assignment is not None else set()
        if not newly:
            return
        self.lost |= newly
        log.warning(
            "group %s: the coordinator no longer knows this member (evicted, or a round "
            "ended without it): its %d partition(s) are lost, dropped unwritten, and it "
            "rejoins owning nothing",
            self.group_id,
            len(newly),
        )
        previous = self.losing
        self.losing = asyncio.ensure_future(self._notify_after(previous, newly))

    async def _notify_after(
        self, previous: asyncio.Task[None] | None, lost: set[KafkaTopicPartition]
    ) -> None:
        if previous is not None:
            await previous
        await self._notify("on_partitions_lost", lost)

    async def _partitions_lost_told(self) -> None:
        """Wait until the listener has heard of every partition lost so far."""
        while self.losing is not None and not self.losing.done():
            await self.losing

    async def _on_join_prepare(self, previous_assignment: Any) -> None:
        state = self.autoscaler_state
        generation_lost = self.generation == OffsetCommitRequest.DEFAULT_GENERATION_ID
        if generation_lost and previous_assignment is not None:
            # Lost, not revoked: nothing of them is flushed or committed (see reset_generation).
            await self._partitions_lost_told()
            self.eager_round = True
            state.holding = False
            await super()._on_join_prepare(None)
            return
        if previous_assignment is None or generation_lost or state.group_mode != COOPERATIVE:
            self.eager_round = True
            state.holding = False
            await super()._on_join_prepare(previous_assignment)
            return
        self.eager_round = False
        state.holding = True
        self.rejoining = True
        self._group_subscription = None
        log.info(
            "rejoining group %s cooperatively, still reading %d partition(s)",
            self.group_id,
            len(previous_assignment.tps),
        )

    async def _do_rejoin_group(self, subscription: Any) -> bool:
        # A failed join or sync waits ``retry_backoff_ms`` (100 ms) before the next try. In
        # a hand-over, members that rejoin at once can make a slower member's SyncGroup fail
        # (the group is already rebalancing again): that member should rejoin right away,
        # not pause the hand-over for 100 ms. Only this step's retries are shortened.
        saved: int = self._retry_backoff_ms  # type: ignore[has-type]
        self._retry_backoff_ms = REJOIN_RETRY_MS
        try:
            return bool(await super()._do_rejoin_group(subscription))
        finally:
            self._retry_backoff_ms = saved

    async def _perform_assignment(self, response: Any) -> dict[str, Any]:
        joined_at = time.monotonic()
        assignments: dict[str, Any] = await super()._perform_assignment(response)
        assignor = self._lookup_assignor(response.group_protocol)
        hold = bool(getattr(assignor, "hold_sync_back", False))
        wait = leader_sync_wait(hold, time.monotonic() - joined_at)
        if wait:
            await asyncio.sleep(wait)
        return assignments

    async def _on_join_complete(
        self, generation: int, member_id: str, protocol: str, member_assignment_bytes: bytes
    ) -> None:
        self.rejoining = False
        await self._partitions_lost_told()  # before anything of the new assignment
        self.lost = set()
        # aiokafka stops heartbeating for a rejoin and starts again only after this step,
        # whose revocation callback flushes and commits the lost partitions: a sink write
        # of seconds. The member is in the new generation already; without heartbeats
        # meanwhile the coordinator evicts it (its next commit: UnknownMemberId).
        self._start_heartbeat_task()
        if self.eager_round:
            await super()._on_join_complete(
                generation, member_id, protocol, member_assignment_bytes
            )
            if self.autoscaler_state.leaving:
                self._rejoin_until_emptied()
            return
        assignor = self._lookup_assignor(protocol)
        assert assignor, f"invalid assignment protocol: {protocol}"
        assignment = ConsumerProtocol.ASSIGNMENT.decode(member_assignment_bytes)
        subscription = self._subscription.subscription
        previous_assignment = subscription.assignment
        old = set(previous_assignment.tps) if previous_assignment is not None else set()
        new = set(assignment.partitions())
        lost, added = old - new, new - old
        if lost:
            await self._notify("on_partitions_revoked", lost)
        # Positions of retained partitions, taken after the revocation callback (the member
        # kept consuming meanwhile) and before the new assignment replaces the old one.
        carried = {tp: previous_assignment.state_value(tp) for tp in old & new}
        self._subscription.assign_from_subscribed(new)
        current = subscription.assignment
        for tp, previous in carried.items():
            state = current.state_value(tp)
            if previous.has_valid_position:
                state.seek(previous.position)
            if previous.paused:
                state.pause()
        assignor.on_assignment(assignment)
        await self._stop_commit_offsets_refresh_task()
        self.start_commit_offsets_refresh_task(current)
        log.info(
            "group %s generation %d: kept %d, revoked %d, added %d partition(s)",
            self.group_id,
            generation,
            len(old & new),
            len(lost),
            len(added),
        )
        if lost:  # which ones: a benchmark weighs each move by its partition's speed (Rscore)
            log.info(
                "group %s generation %d revoked: %s",
                self.group_id,
                generation,
                " ".join(f"{tp.topic}:{tp.partition}" for tp in sorted(lost)),
            )
        await self._notify("on_partitions_assigned", added)
        if self.autoscaler_state.leaving:
            self._rejoin_until_emptied()
        elif self.autoscaler_state.handover_pending or (
            lost and not self.autoscaler_state.one_round
        ):
            # The next round hands what was withheld to its new owners: every member joins
            # it at once rather than when its next heartbeat hears of it. The leader's grace
            # (LEADER_SYNC_GRACE_S) answered every member's sync before anyone got here. A
            # one-round hand-over needs no next round: the new owners already have them.
            self.request_rejoin()

    def _rejoin_until_emptied(self) -> None:
        """A leaving member still assigned something joined a round that had not heard it
        was leaving: it rejoins to say so. One whose partitions were all revoked (flushed
        and committed by the listener) does not rejoin: the consumer sees it own nothing
        and leaves the group, which lets the hand-over round complete without it."""
        assignment = self._subscription.subscription.assignment
        if assignment is not None and assignment.tps:
            self.request_rejoin()

    async def _notify(self, callback: str, partitions: Iterable[KafkaTopicPartition]) -> None:
        listener = self._subscription.listener
        if listener is None:
            return
        try:
            result = getattr(listener, callback)(set(partitions))
            if asyncio.iscoroutine(result):
                await result
        except Exception:
            log.exception("rebalance listener %s of group %s failed", callback, self.group_id)


def is_cooperative(consumer: object) -> bool:
    """Whether ``consumer``'s coordinator has the cooperative join steps
    (:func:`make_cooperative`)."""
    return isinstance(group.coordinator_of(consumer), CooperativeCoordinator)


def make_cooperative(consumer: AIOKafkaConsumer, state: MemberState) -> CooperativeCoordinator:
    """Give a started consumer's coordinator the cooperative join steps from the next
    rebalance on (its first join has nothing to keep)."""
    coordinator = group.coordinator_of(consumer)
    if not isinstance(coordinator, GroupCoordinator):
        raise TypeError("cooperative rebalancing needs a consumer with a group_id, started")
    coordinator.__class__ = CooperativeCoordinator
    coordinator.autoscaler_state = state
    coordinator.rejoining = False
    coordinator.eager_round = False
    coordinator.lost = set()
    coordinator.losing = None
    state.holding = True
    return coordinator  # type: ignore[no-any-return]
