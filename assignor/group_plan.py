"""The leader's decision for a whole group, as a pure function (no Kafka, no I/O).

The Kafka plugin (``assignor.plugin``) decodes the members' metadata, calls
:func:`plan_group`, and encodes the result. Rules, all deterministic whatever member leads:

* heuristic: the one most members are configured with (ties: alphabetical first), so a
  group mid-way through a configuration rollout still agrees; unknown names are ignored;
* capacity: the one measured, when the snapshot carries it; else the smallest capacity any
  member declares (never overload the weakest);
* previous owner of a partition: the member claiming it with the highest generation;
* removal order: members whose identity ends in an ordinal (``sink-3``, a StatefulSet
  pod) are removed highest ordinal first, so they are emptied first; others after them;
* no fresh speeds, no capacity, or a heuristic that fails: fall back to ``sticky``
  (count-balanced, sticky), which never fails a rebalance;
* partitions of a topic go only to the members subscribed to it;
* racks: with the default heuristic, when every member of a packing declares its rack and
  the leader knows each partition's (``partition_racks``), the rack-aware repair packs it
  (:mod:`assignor.racks`): a partition goes to a member in a rack it is local to where one
  has room; otherwise the plan is rack-blind and ``rack_note`` says why;
* speeds are packed with their backlog added when the snapshot says how the sidecar drains
  it (``SpeedView.drain``), so the consumers the sidecar added for a backlog get partitions;
  the planned Rscore is on the plain speeds (what moving costs);
* stickiness never costs a consumer: when the heuristic's plan, starting from where the
  partitions are, overloads a member but a packing from scratch (best fit decreasing) fits
  the members there are, that packing is used instead, each of its consumers given to the
  member already holding most of its speed. The sidecar sizes the group from its own plan
  (its own previous assignment): without this, a group it sized to fit could be overloaded
  by the leader's plan until the next scale-up, and it is the sidecar's count that is right.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from assignor.backlog import DrainRule
from assignor.binpool import EPSILON
from assignor.member_data import MemberData
from assignor.metrics import consumer_loads, rscore
from assignor.racks import RACK_AWARE_BASE, RackAwareRepair, RackLayout
from assignor.registry import HEURISTIC_NAMES, get_heuristic
from assignor.types import Assignment, TopicPartition

FALLBACK_HEURISTIC = "sticky"
REPACK_HEURISTIC = "bfd"  # the tightest of ours, for a plan whose stickiness overloads
_ORDINAL = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True)
class SpeedView:
    """Fresh per-partition speeds (and lags) from the latest snapshot."""

    speeds: Mapping[TopicPartition, float]
    lags: Mapping[TopicPartition, float] = field(default_factory=dict)
    drain: DrainRule | None = None
    # What one consumer drains as measured (the sidecar's --capacity auto); None: the
    # members' declared capacities.
    capacity: float | None = None


@dataclass
class GroupPlan:
    """The leader's result: partitions per member, and why."""

    assignment: dict[str, list[TopicPartition]]
    heuristic: str
    fallback_reason: str | None
    planned_rscore: float
    capacity: float | None
    repacked: bool = False  # a sticky plan overloaded a member; packed from scratch instead
    rack_note: str | None = None  # racks were given but the plan is rack-blind: why


def choose_heuristic(data: Mapping[str, MemberData | None]) -> str | None:
    """Most common valid heuristic among members; ties alphabetical; None if none valid."""
    votes = Counter(
        d.heuristic.strip().lower()
        for d in data.values()
        if d is not None and d.heuristic.strip().lower() in HEURISTIC_NAMES
    )
    if not votes:
        return None
    return min(votes, key=lambda name: (-votes[name], name))


def removal_order(identities: Mapping[str, str]) -> list[str]:
    """Member ids, first to be removed first: identities ending in an ordinal, highest
    ordinal first; then the others by identity, descending (ties by member id)."""
    with_ordinal: list[tuple[int, str, str]] = []
    others: list[str] = []
    for member, identity in identities.items():
        match = _ORDINAL.match(identity)
        if match:
            with_ordinal.append((int(match.group(2)), identity, member))
        else:
            others.append(member)
    with_ordinal.sort(key=lambda item: (-item[0], item[1], item[2]))
    others.sort(key=lambda m: (identities[m], m), reverse=True)
    return [member for _, _, member in with_ordinal] + others


def previous_owners(data: Mapping[str, MemberData | None]) -> dict[TopicPartition, str]:
    """Partition -> member claiming it with the highest generation (ties: lowest member id).
    A member whose claims are of an older generation than another claimant's missed a round
    (its membership lapsed: Kafka's Java consumer calls it partitions lost): none of its
    claims count, as Kafka's CooperativeStickyAssignor ignores them, so a member that
    rejoins still claiming what was taken from it is not handed it back for stickiness'
    sake. (Whether its partitions may move on is :func:`assignor.cooperative.still_held`'s:
    while it still reads them, they wait for it.)"""
    claiming = [d.generation for d in data.values() if d is not None and d.owned]
    newest = max(claiming, default=None)
    best: dict[TopicPartition, tuple[int, str]] = {}
    for member in sorted(data):
        info = data[member]
        if info is None or (newest is not None and info.generation < newest):
            continue
        for tp in info.owned:
            if tp not in best or info.generation > best[tp][0]:
                best[tp] = (info.generation, member)
    return {tp: member for tp, (_, member) in best.items()}


def plan_group(
    members: Mapping[str, MemberData | None],
    subscriptions: Mapping[str, set[str]],
    partitions: Mapping[str, set[int]],
    view: SpeedView | None,
    partition_racks: Mapping[TopicPartition, frozenset[str]] | None = None,
) -> GroupPlan:
    """Assign every partition of every subscribed topic to exactly one member;
    ``partition_racks``: the racks each partition is local to, where the leader knows them."""
    identities = {
        m: (d.identity if d is not None and d.identity else m) for m, d in members.items()
    }
    capacities = [d.capacity for d in members.values() if d is not None and d.capacity]
    capacity = min(capacities) if capacities else None
    if view is not None and view.capacity:
        capacity = view.capacity
    chosen = choose_heuristic(members)
    reason: str | None = None
    if view is None:
        reason = "no fresh speed snapshot"
    elif capacity is None:
        reason = "no member declares a capacity"
    elif chosen is None:
        reason = "no member names a known heuristic"
    name = FALLBACK_HEURISTIC if reason else str(chosen)
    previous = previous_owners(members)
    order = removal_order(identities)
    # Members sharing the same subscribed topics form one packing problem.
    classes: dict[frozenset[str], list[TopicPartition]] = {}
    for topic in sorted(set().union(*subscriptions.values()) if subscriptions else set()):
        subscribers = frozenset(m for m, topics in subscriptions.items() if topic in topics)
        for p in sorted(partitions.get(topic, ())):
            classes.setdefault(subscribers, []).append(TopicPartition(topic, p))
    result: Assignment = {}
    repacked = False
    rack_note: str | None = None
    member_racks = {m: d.rack for m, d in members.items() if d is not None and d.rack}
    speeds_all: dict[TopicPartition, float] = {}
    for subscribers, tps in sorted(classes.items(), key=lambda item: sorted(item[0])):
        ids = sorted(subscribers)
        remove_first = [m for m in order if m in subscribers]
        speeds = {tp: float(view.speeds.get(tp, 0.0)) if view else 0.0 for tp in tps}
        speeds_all.update(speeds)
        lags = {tp: float(view.lags.get(tp, 0.0)) for tp in tps} if view else None
        # Pack by the rule the sidecar sized the group by, so its backlog consumers get work.
        packed = view.drain.effective_speeds(speeds, lags or {}) if view and view.drain else speeds
        part_previous = {tp: m for tp, m in previous.items() if tp in speeds and m in subscribers}
        try:
            if (
                partition_racks is not None
                and member_racks
                and name == RACK_AWARE_BASE
                and capacity
            ):
                rack_plan = RackAwareRepair().plan(
                    packed,
                    capacity=capacity,
                    layout=RackLayout(partition_racks, member_racks),
                    previous=part_previous,
                    members=ids,
                    remove_first=remove_first,
                )
                part, rack_note = rack_plan.assignment, rack_note or rack_plan.fallback
            else:
                part = get_heuristic(name).assign(
                    packed,
                    capacity=capacity or 1.0,
                    previous=part_previous,
                    members=ids,
                    remove_first=remove_first,
                    lags=lags,
                )
        except ValueError as exc:  # a bad snapshot value must not fail the rebalance
            reason, name = f"{name} failed: {exc}", FALLBACK_HEURISTIC
            part = get_heuristic(name).assign(
                dict.fromkeys(tps, 0.0),
                capacity=1.0,
                previous=part_previous,
                members=ids,
                remove_first=remove_first,
            )
        if capacity and name != FALLBACK_HEURISTIC and overloads(part, packed, capacity):
            tighter = get_heuristic(REPACK_HEURISTIC).assign(
                packed,
                capacity=capacity,
                previous=part_previous,
                members=ids,
                remove_first=remove_first,
            )
            if not overloads(tighter, packed, capacity):
                part, repacked = tighter, True
        result.update(part)
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for tp, member in sorted(result.items()):
        assignment[member].append(tp)
    planned = rscore(previous, result, speeds_all, capacity) if capacity else 0.0
    return GroupPlan(assignment, name, reason, planned, capacity, repacked, rack_note)


def overloads(
    assignment: Mapping[TopicPartition, str],
    speeds: Mapping[TopicPartition, float],
    capacity: float,
) -> bool:
    """Whether a member holds partitions faster than ``capacity`` in sum, while at least one
    of them could have been placed elsewhere (a lone partition faster than C overloads any
    member: that is not the plan's doing)."""
    counts = Counter(assignment.values())
    return any(
        load > capacity * (1 + EPSILON) and counts[member] > 1
        for member, load in consumer_loads(assignment, speeds).items()
    )
