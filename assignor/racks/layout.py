"""Where consumers and partitions live: racks (zones), and the share of bytes that cross one.

A partition is *local* to a rack when a consumer there can fetch it without leaving the rack:
its leader's rack, or with follower fetching (KIP-392) every rack holding a replica. Which
of the two applies is the caller's to say; the packing only sees the set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from assignor.types import TopicPartition


@dataclass(frozen=True)
class RackLayout:
    """The racks the packing may use."""

    partition_racks: Mapping[TopicPartition, frozenset[str]]
    """Racks each partition is local to (non-empty for every partition packed)."""
    member_racks: Mapping[str, str] = field(default_factory=dict)
    """Rack of each consumer known so far: the members, or last round's consumers."""


def layout_problem(
    layout: RackLayout,
    partitions: Sequence[TopicPartition],
    members: Sequence[str] | None,
) -> str | None:
    """Why ``layout`` cannot steer this packing (one line), or None when it can.

    The packing then falls back to the rack-blind one: a partition without a rack, a member
    without one or in a rack no partition lives in, or every member in one rack leave
    nothing a rack-aware plan could improve, or nothing it could trust.
    """
    known: set[str] = set()
    for tp in partitions:
        racks = layout.partition_racks.get(tp)
        if not racks or not all(isinstance(r, str) and r for r in racks):
            return f"partition {tp.topic}:{tp.partition} has no rack"
        known.update(racks)
    if len(known) < 2:
        return f"every partition lives in rack {next(iter(known), '?')!r} alone"
    if members is None:
        return None
    member_racks = set()
    for member in members:
        rack = layout.member_racks.get(member)
        if not isinstance(rack, str) or not rack:
            return f"member {member!r} has no rack"
        if rack not in known:
            return f"member {member!r} is in rack {rack!r}, where no partition lives"
        member_racks.add(rack)
    if len(member_racks) == 1 and len(members) > 1:
        return f"every member is in rack {next(iter(member_racks))!r}"
    return None


def cross_rack_speed(
    assignment: Mapping[TopicPartition, str],
    speeds: Mapping[TopicPartition, float],
    consumer_racks: Mapping[str, str],
    partition_racks: Mapping[TopicPartition, frozenset[str]],
) -> float:
    """Summed speed of the partitions whose consumer is in none of their racks (a consumer
    of unknown rack counts as crossing)."""
    return sum(
        speeds[tp]
        for tp, consumer in assignment.items()
        if consumer_racks.get(consumer) not in partition_racks.get(tp, frozenset())
    )


def cross_rack_share(
    assignment: Mapping[TopicPartition, str],
    speeds: Mapping[TopicPartition, float],
    consumer_racks: Mapping[str, str],
    partition_racks: Mapping[TopicPartition, frozenset[str]],
) -> float:
    """:func:`cross_rack_speed` over the total speed assigned (0 when nothing flows)."""
    total = sum(speeds[tp] for tp in assignment)
    if total <= 0:
        return 0.0
    return cross_rack_speed(assignment, speeds, consumer_racks, partition_racks) / total
