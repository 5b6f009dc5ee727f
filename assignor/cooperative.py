"""Cooperative rebalancing, the leader's side (KIP-429 semantics), as pure functions.

In a cooperative round, members keep reading the partitions they own while the group
rejoins. A partition whose owner changes must therefore not reach its new owner in the same
round: the old owner still reads it. The leader withholds it; the old owner, seeing it gone
from its own assignment, revokes it (flush, commit) and rejoins, and the next round hands
it over, now owned by nobody.

A round that withheld something says so to every member (``handover`` in the assignment's
user data): they all rejoin as soon as they have their assignment, so the hand-over round
starts at once instead of when each member's next heartbeat hears of it (a whole heartbeat
interval after the first round, since the members' heartbeats restart together). The
hand-over round hands over what the round before planned (:func:`carried_plan`); it plans
the group again only if the members or their subscriptions changed meanwhile.

When every member can (``releases`` in its member data), a moving partition is not withheld
but given at once, marked *awaited* in its new owner's assignment (:func:`give_moving`): the
old owner, seeing it gone, revokes it (flush, commit) and marks that last commit *released*
(:func:`mark_released`); the new owner holds it paused until the group's committed offset
carries that mark (:func:`released_generation`), then reads on from it. A move then costs
the old owner's flush and commit plus one look at the committed offsets, not a second
round: the group neither rejoins nor waits for its slowest member again.

A member shutting down says so (``leaving``) and keeps reading while it rejoins: the leader
plans the group without it, so its partitions are withheld from their new owners like any
other moving partition; it revokes them, leaves the group instead of rejoining, and the
hand-over round gives them on. A scale-in then pauses a partition for one hand-over round,
not for the heartbeat interval the others need to notice a member that left at once.

Members that rebalance eagerly (an SDK configured ``rebalance_protocol="eager"``, an older
version, a member whose generation was reset) have already stopped reading when they join:
they hold nothing, so nothing of theirs is withheld. One of them in the group switches the
whole group to eager for the following rounds (the assignment says so); the group goes back
to cooperative once every member supports it again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from assignor.member_data import MemberData, by_topic
from assignor.types import TopicPartition
from assignor.validation import json_document

COOPERATIVE = "cooperative"
EAGER = "eager"
PROTOCOLS = (COOPERATIVE, EAGER)
# The key of the release mark in commit metadata (a JSON object: the capacity report, or
# this key alone). Other readers of the metadata ignore keys they do not know.
RELEASED_KEY = "rel"


@dataclass(frozen=True)
class CooperativePlan:
    """What each member receives this round, and what was held back for the next."""

    assignment: dict[str, list[TopicPartition]]
    withheld: dict[str, list[TopicPartition]]
    mode: str
    awaiting: dict[str, list[TopicPartition]] = field(default_factory=dict)
    """Partitions given while another member still reads them: their new owner waits for
    the old owner's release (see :func:`give_moving`)."""


def group_mode(members: Mapping[str, MemberData | None]) -> str:
    """``cooperative`` when every member supports it, else ``eager``."""
    if members and all(d is not None and d.cooperative for d in members.values()):
        return COOPERATIVE
    return EAGER


def staying(members: Mapping[str, MemberData | None]) -> dict[str, MemberData | None]:
    """The members the plan is for: every member but those leaving the group."""
    return {m: d for m, d in members.items() if d is None or not d.leaving}


def releases_supported(members: Mapping[str, MemberData | None]) -> bool:
    """Whether every member hands partitions over by release (:func:`give_moving`)."""
    return bool(members) and all(
        d is not None and d.cooperative and d.releases for d in members.values()
    )


def still_held(members: Mapping[str, MemberData | None]) -> dict[TopicPartition, set[str]]:
    """Partition -> the members still reading it while they rejoin (cooperative holders).
    A partition a member owns but still awaits the release of is not read by it."""
    held: dict[TopicPartition, set[str]] = {}
    for member, data in members.items():
        if data is not None and data.holding:
            for tp in set(data.owned) - set(data.awaiting):
                held.setdefault(tp, set()).add(member)
    return held


def withhold_moving(
    planned: Mapping[str, list[TopicPartition]], members: Mapping[str, MemberData | None]
) -> CooperativePlan:
    """Remove from each member's planned partitions those another member still reads.

    Any other holder blocks the hand-over, whatever its generation: two claimants (a member
    that missed a round) both stop reading before the partition moves on.
    """
    held = still_held(members)
    assignment: dict[str, list[TopicPartition]] = {}
    withheld: dict[str, list[TopicPartition]] = {}
    for member, tps in planned.items():
        kept: list[TopicPartition] = []
        for tp in tps:
            if held.get(tp, set()) - {member}:
                withheld.setdefault(member, []).append(tp)
            else:
                kept.append(tp)
        assignment[member] = kept
    return CooperativePlan(assignment, withheld, group_mode(members))


def give_moving(
    planned: Mapping[str, list[TopicPartition]], members: Mapping[str, MemberData | None]
) -> CooperativePlan:
    """Give every member its planned partitions at once, marking as awaited those another
    member still reads (and this one does not): the new owner reads them only once the
    old owner's commit says it released them. Nothing is withheld, no round follows."""
    held = still_held(members)
    awaiting: dict[str, list[TopicPartition]] = {}
    for member, tps in planned.items():
        for tp in tps:
            holders = held.get(tp, set())
            if holders and member not in holders:
                awaiting.setdefault(member, []).append(tp)
    assignment = {member: list(tps) for member, tps in planned.items()}
    return CooperativePlan(assignment, {}, group_mode(members), awaiting)


def mark_released(metadata: str, generation: int) -> str:
    """Commit metadata saying its committer released the partition in ``generation``:
    ``metadata`` (a JSON object such as the capacity report, or empty) with the mark added."""
    try:
        raw = json_document(metadata) if metadata else {}
    except ValueError:
        raw = {}
    fields = raw if isinstance(raw, dict) else {}
    fields[RELEASED_KEY] = generation
    return json.dumps(fields, separators=(",", ":"), allow_nan=False)


def released_generation(metadata: str | None) -> int | None:
    """The generation a commit's metadata says its partition was released in; None when it
    carries no release mark (an ordinary commit, another tool's metadata, garbage)."""
    if not metadata or RELEASED_KEY not in metadata:
        return None
    try:
        value = _field(metadata, RELEASED_KEY)
    except (ValueError, AttributeError):
        return None
    return value if _count(value) else None


def gives_partitions(
    assignment: Mapping[str, list[TopicPartition]], members: Mapping[str, MemberData | None]
) -> bool:
    """Whether ``assignment`` gives some member a partition it does not read yet (one handed
    over, or one nobody owned)."""
    for member, tps in assignment.items():
        data = members.get(member)
        owned = set(data.owned) if data is not None else set()
        if any(tp not in owned for tp in tps):
            return True
    return False


def holds_sync_back(plan: CooperativePlan, members: Mapping[str, MemberData | None]) -> bool:
    """Whether the leader should hold its SyncGroup back (the grace of
    consumer_sdk.kafka_client.cooperative): in a round that withholds partitions, so that every
    member's sync is answered before the hand-over round starts; but not in one that also
    gives partitions (to ``members``, as they joined), whose new owners would wait that long
    with the partitions read by nobody."""
    return bool(plan.withheld) and not gives_partitions(plan.assignment, members)


GroupShape = tuple[dict[str, frozenset[str]], dict[str, frozenset[int]]]
"""Members (member id -> subscribed topics) and the partitions of their topics."""


def group_shape(
    subscriptions: Mapping[str, set[str]], partitions: Mapping[str, set[int]]
) -> GroupShape:
    """A round's members and partitions, frozen for comparison with a later round's."""
    return (
        {m: frozenset(topics) for m, topics in subscriptions.items()},
        {t: frozenset(ps) for t, ps in partitions.items()},
    )


@dataclass(frozen=True)
class PendingHandover:
    """What a round that withheld partitions planned, for the hand-over round after it."""

    shape: GroupShape
    planned: dict[str, list[TopicPartition]]


def carried_plan(
    pending: PendingHandover | None,
    subscriptions: Mapping[str, set[str]],
    partitions: Mapping[str, set[int]],
) -> dict[str, list[TopicPartition]] | None:
    """The previous round's plan when this round only completes its hand-over: the same
    members with the same subscriptions (a leaving member counts as gone in both) and the
    same partitions. None when something else changed: the group is planned again.

    Re-planning a hand-over round on newer speeds would move other partitions, withhold
    them, and need yet another round: a join would cost three rounds or more, not two.
    """
    if pending is None or pending.shape != group_shape(subscriptions, partitions):
        return None
    return dict(pending.planned)


def encode_assignment_data(
    mode: str,
    handover: bool = False,
    members: int | None = None,
    awaiting: Iterable[TopicPartition] = (),
    one_round: bool = False,
) -> bytes:
    """The user_data of every assignment the leader sends: the group's mode, whether a
    hand-over round follows (something was withheld), how many members the plan is for
    (those not leaving), whether moving partitions are handed over in this one round
    (:func:`give_moving`) and which of this member's partitions await a release."""
    if mode not in PROTOCOLS:
        raise ValueError(f"mode must be one of {', '.join(PROTOCOLS)}, got {mode!r}")
    data: dict[str, object] = {"mode": mode}
    if handover:
        data["handover"] = True
    if members is not None:
        data["members"] = members
    if one_round:
        data["one_round"] = True
    awaited = by_topic(awaiting)
    if awaited:
        data["await"] = awaited
    return json.dumps(data, separators=(",", ":")).encode()


def _field(data: bytes | str | None, name: str) -> object:
    """Field ``name`` of the JSON object in ``data`` (None when absent; ``data`` empty: an
    empty object); ValueError when ``data`` is not a JSON object of bounded size and depth."""
    document = json_document(data or b"{}")
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    return document.get(name)


def _count(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an integer >= 0 (not a boolean)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def decode_awaiting(data: bytes | None) -> frozenset[TopicPartition]:
    """The partitions an assignment says await their old owner's release (none when absent
    or unreadable: such partitions are read at once, as from an older leader)."""
    try:
        raw: Any = _field(data, "await") or {}
        return frozenset(
            TopicPartition(topic, p)
            for topic, partitions in raw.items()
            for p in partitions
            if isinstance(topic, str) and isinstance(p, int) and not isinstance(p, bool) and p >= 0
        )
    except (ValueError, AttributeError, TypeError):
        return frozenset()


def decode_members(data: bytes | None) -> int | None:
    """How many members the leader planned for; None when absent or unreadable (an older
    leader)."""
    try:
        members = _field(data, "members")
    except (ValueError, AttributeError):
        return None
    return members if _count(members) else None


def decode_one_round(data: bytes | None) -> bool:
    """Whether the assignment hands moving partitions over in its own round (False when
    absent or unreadable: a member that lost partitions rejoins for the hand-over round)."""
    try:
        return _field(data, "one_round") is True
    except (ValueError, AttributeError):
        return False


def decode_handover(data: bytes | None) -> bool:
    """Whether the assignment announces a hand-over round (False when absent or unreadable:
    an older leader, whose members wait for their heartbeat instead)."""
    try:
        return _field(data, "handover") is True
    except (ValueError, AttributeError):
        return False


def decode_assignment_data(data: bytes | None) -> str:
    """The group's mode from an assignment; ``eager`` when absent or unreadable (a leader
    that does not withhold moving partitions)."""
    try:
        mode = _field(data, "mode")
    except (ValueError, AttributeError):
        return EAGER
    return mode if mode in PROTOCOLS else EAGER
