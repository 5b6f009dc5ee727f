"""The aiokafka partition-assignor plugin: the group is packed by write speed.

aiokafka calls an assignor's methods on the class, so :func:`build_assignor` binds the
configuration into a fresh subclass. It runs :func:`assignor.group_plan.plan_group` on the
leader. One protocol name (``autoscaler``) for every member whatever its heuristic: the
heuristic travels in user_data (mixed assignor lists abort the embedded broker, and a
rollout that changes the heuristic must not split the group).

Imported lazily: ``import assignor`` does not import aiokafka.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from assignor.cooperative import (
    EAGER,
    PendingHandover,
    carried_plan,
    decode_assignment_data,
    decode_awaiting,
    decode_handover,
    decode_members,
    decode_one_round,
    encode_assignment_data,
    give_moving,
    group_shape,
    holds_sync_back,
    releases_supported,
    staying,
    withhold_moving,
)
from assignor.group_plan import GroupPlan, SpeedView, plan_group
from assignor.member_data import MemberData, decode_member_data
from assignor.types import TopicPartition, partitions_by_topic

PROTOCOL_NAME = "autoscaler"
PROTOCOL_VERSION = 0
log = logging.getLogger(__name__)

SpeedSource = Callable[[], SpeedView | None]
"""Returns the latest fresh speeds, or None when there is no fresh snapshot."""


@dataclass
class MemberState:
    """What this member reports about itself; the SDK updates it after every join.

    ``cooperative``: this member rebalances cooperatively; ``holding``: it still reads
    ``owned`` while rejoining; ``group_mode``: what the leader's last assignment said;
    ``handover_pending``: that assignment withheld partitions, so a hand-over round follows;
    ``leaving``: this member is shutting down and asks the leader for nothing;
    ``group_size``: how many members the leader's last plan was for (None: not said);
    ``releases``: it hands partitions over by release (:func:`assignor.cooperative.give_moving`);
    ``awaiting``: partitions of ``owned`` it does not read yet, awaiting their old owner's
    release (set from each assignment; the SDK removes each as its release arrives);
    ``one_round``: the last assignment handed moving partitions over in its own round;
    ``declared_unread``: the partitions the join in progress told the leader this member
    does not read (``awaiting`` as it was sent): the SDK must not start reading them before
    that round's assignment (the leader may give them on with no release to wait for);
    ``rack``: this member's rack (its ``client.rack``), None: none; ``follower_fetching``:
    the brokers let consumers fetch from an in-sync replica in their rack (KIP-392), so a
    partition is local to every rack holding one, not only to its leader's.
    """

    identity: str
    heuristic: str
    capacity: float | None = None
    generation: int = -1
    owned: tuple[TopicPartition, ...] = ()
    cooperative: bool = False
    holding: bool = False
    group_mode: str = EAGER
    handover_pending: bool = False
    leaving: bool = False
    group_size: int | None = None
    releases: bool = False
    awaiting: frozenset[TopicPartition] = frozenset()
    one_round: bool = False
    declared_unread: frozenset[TopicPartition] = frozenset()
    rack: str | None = None
    follower_fetching: bool = False


@dataclass
class PluginStats:
    """Counters the SDK exports as metrics."""

    plans: int = 0
    carried: int = 0
    fallbacks: int = 0
    rack_blind: int = 0
    repacks: int = 0
    withheld: int = 0
    awaited: int = 0
    undecodable_members: int = 0
    last_plan: GroupPlan | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(
        self, plan: GroupPlan | None, undecodable: int, withheld: int, awaited: int = 0
    ) -> None:
        """Count one leader decision: a new plan, or (None) the previous round's plan
        carried into its hand-over round; partitions withheld, and given awaiting release."""
        with self._lock:
            if plan is None:
                self.carried += 1
            else:
                self.plans += 1
                self.fallbacks += plan.fallback_reason is not None
                self.rack_blind += plan.rack_note is not None
                self.repacks += plan.repacked
                self.last_plan = plan
            self.withheld += withheld
            self.awaited += awaited
            self.undecodable_members += undecodable


@dataclass
class _LeaderMemory:
    """What this member, when it leads, remembers from one round to the next."""

    pending: PendingHandover | None = None


def build_assignor(
    state: MemberState,
    speeds: SpeedSource,
    stats: PluginStats | None = None,
    *,
    leader_delay_s: float = 0.0,
) -> type[AbstractPartitionAssignor]:
    """An assignor class bound to this member's state and speed source.

    ``leader_delay_s`` delays the leader's answer so followers' SyncGroup reach the broker
    first: needed with the embedded broker only (docs/architecture.md section 7), keep 0 elsewhere.
    """
    if leader_delay_s < 0 or leader_delay_s > 5:
        raise ValueError(f"leader_delay_s must be in [0, 5], got {leader_delay_s!r}")
    counters = stats if stats is not None else PluginStats()
    warned_reasons: set[str] = set()
    memory = _LeaderMemory()

    class AutoscalerAssignor(AbstractPartitionAssignor):
        name = PROTOCOL_NAME
        version = PROTOCOL_VERSION
        # Set by the last assign() this member ran as leader: the round withholds
        # partitions and gives none (assignor.cooperative.holds_sync_back).
        hold_sync_back = False

        @classmethod
        def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
            data = MemberData(
                state.identity,
                state.heuristic,
                state.capacity,
                state.generation,
                tuple(state.owned),
                state.cooperative,
                state.holding and state.cooperative,
                state.leaving,
                state.releases and state.cooperative,
                tuple(sorted(state.awaiting & set(state.owned))),
                state.rack,
            )
            state.declared_unread = frozenset(data.awaiting)
            return ConsumerProtocolMemberMetadata(cls.version, sorted(topics), data.encode())

        @classmethod
        def assign(
            cls, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
        ) -> dict[str, ConsumerProtocolMemberAssignment]:
            decoded = {m: decode_member_data(meta.user_data) for m, meta in members.items()}
            undecodable = sum(d is None for d in decoded.values())
            if undecodable:
                log.warning(
                    "%d member(s) sent undecodable user_data: treated as owning nothing",
                    undecodable,
                )
            # Members shutting down get nothing; what they hold moves like any partition.
            planned_for = staying(decoded)
            subscriptions = {m: set(members[m].subscription) for m in planned_for}
            topics = set().union(*subscriptions.values()) if subscriptions else set()
            partitions = {t: set(cluster.partitions_for_topic(t) or ()) for t in topics}
            carried = carried_plan(memory.pending, subscriptions, partitions)
            plan: GroupPlan | None = None
            if carried is None:
                racked = any(d is not None and d.rack for d in planned_for.values())
                local = (
                    partition_racks(cluster, topics, state.follower_fetching) if racked else None
                )
                plan = plan_group(planned_for, subscriptions, partitions, speeds(), local)
                carried = plan.assignment
                if plan.fallback_reason and plan.fallback_reason not in warned_reasons:
                    warned_reasons.add(plan.fallback_reason)
                    log.warning(
                        "assignment falls back to %s: %s", plan.heuristic, plan.fallback_reason
                    )
                if plan.rack_note and plan.rack_note not in warned_reasons:
                    warned_reasons.add(plan.rack_note)
                    log.warning("assignment is rack-blind: %s", plan.rack_note)
            # Partitions another member still reads go to their new owner awaiting its
            # release, or, if some member cannot release, wait for the next round (KIP-429).
            planned = {m: carried.get(m, []) for m in decoded}
            one_round = releases_supported(decoded)
            if one_round:
                handed = give_moving(planned, decoded)
            else:
                handed = withhold_moving(planned, decoded)
            withheld = sum(map(len, handed.withheld.values()))
            awaited = sum(map(len, handed.awaiting.values()))
            cls.hold_sync_back = holds_sync_back(handed, decoded)
            counters.record(plan, undecodable, withheld, awaited)
            memory.pending = (
                PendingHandover(group_shape(subscriptions, partitions), dict(carried))
                if withheld
                else None
            )
            if leader_delay_s:
                time.sleep(leader_delay_s)
            return {
                member: ConsumerProtocolMemberAssignment(
                    cls.version,
                    partitions_by_topic(tps),
                    encode_assignment_data(
                        handed.mode,
                        handover=bool(handed.withheld),
                        members=len(planned_for),
                        awaiting=handed.awaiting.get(member, ()),
                        one_round=one_round,
                    ),
                )
                for member, tps in handed.assignment.items()
            }

        @classmethod
        def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
            state.owned = tuple(
                TopicPartition(topic, p) for topic, ps in assignment.assignment for p in ps
            )
            state.group_mode = decode_assignment_data(assignment.user_data)
            state.handover_pending = decode_handover(assignment.user_data)
            state.group_size = decode_members(assignment.user_data)
            state.awaiting = decode_awaiting(assignment.user_data) & set(state.owned)
            state.one_round = decode_one_round(assignment.user_data)
            state.declared_unread = frozenset()  # the round that was told is over

    return AutoscalerAssignor


def partition_racks(
    cluster: Any, topics: Iterable[str], follower_fetching: bool
) -> dict[TopicPartition, frozenset[str]]:
    """The racks each partition of ``topics`` is local to, from the cluster metadata: its
    leader's, or with ``follower_fetching`` every in-sync replica's. A partition whose
    brokers declare no rack is left out (the plan then says so and is rack-blind)."""
    rack_of = {b.nodeId: b.rack for b in cluster.brokers() if b.rack}
    # aiokafka keeps replicas only in its metadata's private map (pinned minor version).
    described = getattr(cluster, "_partitions", {})
    racks: dict[TopicPartition, frozenset[str]] = {}
    for topic in topics:
        for partition, meta in described.get(topic, {}).items():
            nodes = meta.isr if follower_fetching else (meta.leader,)
            local = frozenset(rack_of[n] for n in nodes if n in rack_of)
            if local:
                racks[TopicPartition(topic, partition)] = local
    return racks
