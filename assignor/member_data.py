"""What each group member tells the leader in its JoinGroup user_data (pure codec).

Versioned compact JSON::

    {"v": 1, "owned": {"orders": [0, 3]}, "generation": 7, "identity": "sink-2",
     "capacity": 5000.0, "heuristic": "repair", "coop": true, "holding": true,
     "leaving": false}

``coop``: the member rebalances cooperatively; ``holding``: it still reads ``owned`` while
it rejoins (absent in older members: eager, holding nothing); ``leaving``: it is shutting
down and asks for nothing, so the round hands what it holds to the others while it still
reads them (absent in older members: staying).

Undecodable or invalid data decodes to ``None``: the leader then treats that member as
owning nothing, it never fails the rebalance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from assignor.types import TopicPartition
from assignor.validation import is_finite_number, is_integer

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

    def encode(self) -> bytes:
        """Bytes for the JoinGroup user_data."""
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(self.owned):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return json.dumps(
            {
                "v": MEMBER_DATA_VERSION,
                "owned": by_topic,
                "generation": self.generation,
                "identity": self.identity,
                "capacity": self.capacity,
                "heuristic": self.heuristic,
                "coop": self.cooperative,
                "holding": self.holding,
                "leaving": self.leaving,
            },
            separators=(",", ":"),
        ).encode()


def decode_member_data(data: bytes | None) -> MemberData | None:
    """Parse user_data; ``None`` if it is absent, garbage or of another version."""
    if not data:
        return None
    try:
        raw = json.loads(data)
        if not isinstance(raw, dict) or raw.get("v") != MEMBER_DATA_VERSION:
            return None
        identity, heuristic = raw["identity"], raw["heuristic"]
        generation, capacity, owned_raw = raw["generation"], raw.get("capacity"), raw["owned"]
        if not (isinstance(identity, str) and isinstance(heuristic, str)):
            return None
        cooperative, holding = raw.get("coop", False), raw.get("holding", False)
        leaving = raw.get("leaving", False)
        if not all(isinstance(flag, bool) for flag in (cooperative, holding, leaving)):
            return None
        if not is_integer(generation):
            return None
        if capacity is not None and not (is_finite_number(capacity) and capacity > 0):
            return None
        owned: list[TopicPartition] = []
        for topic, partitions in owned_raw.items():
            if not isinstance(topic, str) or not isinstance(partitions, list):
                return None
            for p in partitions:
                if not is_integer(p) or p < 0:
                    return None
                owned.append(TopicPartition(topic, p))
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
    )
