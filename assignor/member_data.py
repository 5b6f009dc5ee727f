"""What each group member tells the leader in its JoinGroup user_data (pure codec).

Versioned compact JSON::

    {"v": 1, "owned": {"orders": [0, 3]}, "generation": 7, "identity": "sink-2",
     "capacity": 5000.0, "heuristic": "repair", "coop": true, "holding": true,
     "leaving": false, "rel": true, "awaiting": {"orders": [3]}, "rack": "eu-west-1a"}

``coop``: the member rebalances cooperatively; ``holding``: it still reads ``owned`` while
it rejoins (absent in older members: eager, holding nothing); ``leaving``: it is shutting
down and asks for nothing, so the round hands what it holds to the others while it still
reads them (absent in older members: staying); ``rel``: it hands partitions over by release
(commits a release mark, awaits one) rather than in a second round (absent: it does not);
``awaiting``: partitions of ``owned`` it does not read yet, awaiting their old owner's
release (absent: none); ``rack``: the member's rack (zone), its ``client.rack`` (absent,
null or not a usable name: none, and the leader's plan is rack-blind for its group).

Undecodable or invalid data decodes to ``None``: the leader then treats that member as
owning nothing, it never fails the rebalance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from assignor.types import TopicPartition, partitions_by_topic
from assignor.validation import is_finite_number, is_integer, json_document

MEMBER_DATA_VERSION = 1


@dataclass(frozen=True)
class MemberData:
    """A member's view of itself."""

    identity: str
    heuristic: str
    capacity: float | None = None
    generation: int = -1
    owned: tuple[TopicPartition, ...] = field(default_factory=tuple)
    cooperative: bool = False
    holding: bool = False
    leaving: bool = False
    releases: bool = False
    awaiting: tuple[TopicPartition, ...] = field(default_factory=tuple)
    rack: str | None = None

    def encode(self) -> bytes:
        """Bytes for the JoinGroup user_data."""
        return json.dumps(
            {
                "v": MEMBER_DATA_VERSION,
                "owned": by_topic(self.owned),
                "generation": self.generation,
                "identity": self.identity,
                "capacity": self.capacity,
                "heuristic": self.heuristic,
                "coop": self.cooperative,
                "holding": self.holding,
                "leaving": self.leaving,
                "rel": self.releases,
                "awaiting": by_topic(self.awaiting),
                "rack": self.rack,
            },
            separators=(",", ":"),
        ).encode()


RACK_NAME_RULE = "1-255 characters, none of them whitespace or control characters"


def is_rack_name(value: object) -> bool:
    """Whether ``value`` is a usable rack (zone) name (:data:`RACK_NAME_RULE`)."""
    return (
        isinstance(value, str)
        and 1 <= len(value) <= 255
        and all(c.isprintable() and not c.isspace() for c in value)
    )


def by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """``{"topic": [partition, ...]}``, sorted: how member and assignment data list them."""
    return dict(partitions_by_topic(tps))


def _partitions(raw: object) -> list[TopicPartition] | None:
    """``{"topic": [partition, ...]}`` as partitions; None when malformed."""
    if not isinstance(raw, dict):
        return None
    out: list[TopicPartition] = []
    for topic, partitions in raw.items():
        if not isinstance(topic, str) or not isinstance(partitions, list):
            return None
        for p in partitions:
            if not is_integer(p) or p < 0:
                return None
            out.append(TopicPartition(topic, p))
    return out


def decode_member_data(data: bytes | None) -> MemberData | None:
    """Parse user_data; ``None`` if it is absent, garbage or of another version."""
    if not data:
        return None
    try:
        raw = json_document(data)
        if not isinstance(raw, dict) or raw.get("v") != MEMBER_DATA_VERSION:
            return None
        identity, heuristic = raw["identity"], raw["heuristic"]
        generation, capacity, owned_raw = raw["generation"], raw.get("capacity"), raw["owned"]
        if not (isinstance(identity, str) and isinstance(heuristic, str)):
            return None
        cooperative, holding = raw.get("coop", False), raw.get("holding", False)
        leaving, releases = raw.get("leaving", False), raw.get("rel", False)
        if not all(isinstance(f, bool) for f in (cooperative, holding, leaving, releases)):
            return None
        if not is_integer(generation):
            return None
        if capacity is not None and not (is_finite_number(capacity) and capacity > 0):
            return None
        owned = _partitions(owned_raw)
        awaiting = _partitions(raw.get("awaiting", {}))
        rack = raw.get("rack")
        if owned is None or awaiting is None:
            return None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return MemberData(
        identity,
        heuristic,
        float(capacity) if capacity else None,
        generation,
        tuple(owned),
        cooperative,
        holding,
        leaving,
        releases,
        tuple(awaiting),
        rack if is_rack_name(rack) else None,
    )
