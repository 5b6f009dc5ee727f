"""Input checks shared by every heuristic: clear errors naming the field and accepted range."""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeGuard

from assignor.types import TopicPartition

# The longest JSON a group member may send another (its userdata, an assignment, commit
# metadata): far above any real one (a member owning 10,000 partitions writes about 60 KB).
MAX_GROUP_JSON_CHARS = 1 << 20


def json_document(data: bytes | str, max_chars: int = MAX_GROUP_JSON_CHARS) -> object:
    """``data`` parsed as JSON; ValueError when it is longer than ``max_chars``, not JSON,
    or nested too deeply for the parser (whose RecursionError would otherwise pass every
    caller's ValueError handler: a member's userdata stopped the leader's assign())."""
    if len(data) > max_chars:
        raise ValueError(f"JSON of {len(data)} characters, at most {max_chars}")
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


@dataclass(frozen=True)
class Problem:
    """A validated assignment problem, in canonical form."""

    speeds: dict[TopicPartition, float]
    capacity: float
    previous: dict[TopicPartition, str]
    """Previous owner of every partition that still exists (and, with members, whose owner
    is still a member)."""
    members: tuple[str, ...] | None
    """Members in keep-priority order (the ones to remove first come last), or None."""


def _as_partition(key: object, field: str) -> TopicPartition:
    if isinstance(key, TopicPartition):
        return key
    if (
        isinstance(key, tuple)
        and len(key) == 2
        and isinstance(key[0], str)
        and isinstance(key[1], int)
        and key[1] >= 0
    ):
        return TopicPartition(key[0], key[1])
    raise ValueError(
        f"{field} keys must be TopicPartition(topic: str, partition: int >= 0), got {key!r}"
    )


_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
TOPIC_NAME_RULE = "1-249 characters from [a-zA-Z0-9._-], not '.' or '..'"


def is_topic_name(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a topic name Kafka accepts (:data:`TOPIC_NAME_RULE`)."""
    return (
        isinstance(value, str)
        and value not in (".", "..")
        and _TOPIC_NAME.fullmatch(value) is not None
    )


def is_integer(value: object) -> TypeGuard[int]:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


INT64_MAX = 2**63 - 1
_FLOAT_MAX_INT = int(sys.float_info.max)


def is_int64(value: object) -> TypeGuard[int]:
    """An int (not a bool) that fits Kafka's 64-bit offsets and counters."""
    return is_integer(value) and -INT64_MAX - 1 <= value <= INT64_MAX


def is_finite_number(value: object) -> TypeGuard[int | float]:
    """An int or float (not a bool) that is neither infinite nor NaN, and, for an int, within
    a float's range (a 400-digit integer is no usable number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):
        return abs(value) <= _FLOAT_MAX_INT
    return math.isfinite(value)


def check_non_negative(value: object, field: str) -> float:
    """Return ``value`` as a float, or raise naming ``field`` if it is not finite and >= 0."""
    if not is_finite_number(value) or value < 0:
        raise ValueError(f"{field} must be a finite number >= 0, got {value!r}")
    return float(value)


def check_capacity(capacity: object) -> float:
    """Return the capacity as a float, or raise if it is not a finite number > 0."""
    if not is_finite_number(capacity) or capacity <= 0:
        raise ValueError(f"capacity must be a finite number > 0, got {capacity!r}")
    return float(capacity)


def check_speeds(
    speeds: Mapping[TopicPartition, float], field: str = "speeds"
) -> dict[TopicPartition, float]:
    """Canonical copy of a speed (or lag) mapping; raises on a bad key or value."""
    if not isinstance(speeds, Mapping):
        raise ValueError(
            f"{field} must be a mapping of TopicPartition to a number, got {type(speeds).__name__}"
        )
    checked: dict[TopicPartition, float] = {}
    isfinite = math.isfinite
    for key, value in speeds.items():
        # Fast path for the common case; anything else goes through the full checks.
        if type(key) is TopicPartition and type(value) is float and isfinite(value) and value >= 0:
            checked[key] = value
            continue
        tp = _as_partition(key, field)
        checked[tp] = check_non_negative(value, f"{field}[{tp.topic}:{tp.partition}]")
    return checked


def check_members(
    members: Sequence[str] | None, remove_first: Sequence[str] | None
) -> tuple[str, ...] | None:
    """Members in keep-priority order: members not removed first (given order), then the
    ``remove_first`` ones from the last to be removed to the first."""
    if remove_first is not None and (
        isinstance(remove_first, str)
        or not isinstance(remove_first, Sequence)
        or not all(isinstance(m, str) and m for m in remove_first)
    ):
        raise ValueError("remove_first must be a list of member ids (non-empty strings)")
    if members is None:
        if remove_first:
            raise ValueError("remove_first needs members: it orders members for removal")
        return None
    if isinstance(members, str) or not isinstance(members, Sequence):
        raise ValueError(f"members must be a sequence of member ids, got {type(members).__name__}")
    seen: set[str] = set()
    for member in members:
        if not isinstance(member, str) or not member:
            raise ValueError(f"members must hold non-empty string ids, got {member!r}")
        if member in seen:
            raise ValueError(f"members must be unique, {member!r} appears twice")
        seen.add(member)
    removal = list(remove_first or ())
    for member in removal:
        if member not in seen:
            raise ValueError(f"remove_first names {member!r}, which is not in members")
    if len(set(removal)) != len(removal):
        raise ValueError("remove_first must not repeat a member")
    removed = set(removal)
    kept = [m for m in members if m not in removed]
    return (*kept, *reversed(removal))


def make_problem(
    speeds: Mapping[TopicPartition, float],
    capacity: float,
    previous: Mapping[TopicPartition, str] | None,
    members: Sequence[str] | None,
    remove_first: Sequence[str] | None,
) -> Problem:
    """Validate all inputs of ``assign`` and return them in canonical form."""
    checked_speeds = check_speeds(speeds)
    checked_capacity = check_capacity(capacity)
    ordered_members = check_members(members, remove_first)
    if ordered_members is not None and not ordered_members and checked_speeds:
        raise ValueError("members must name at least one member when there are partitions")
    if previous is not None and not isinstance(previous, Mapping):
        raise ValueError(
            "previous must be a mapping of TopicPartition to member id, "
            f"got {type(previous).__name__}"
        )
    allowed = set(ordered_members) if ordered_members is not None else None
    kept_previous: dict[TopicPartition, str] = {}
    for key, owner in (previous or {}).items():
        tp = key if type(key) is TopicPartition else _as_partition(key, "previous")
        if type(owner) is not str or not owner:
            raise ValueError(
                f"previous[{tp.topic}:{tp.partition}] must be a non-empty member id, got {owner!r}"
            )
        # Vanished partitions are dropped; partitions of departed members count as new.
        if tp in checked_speeds and (allowed is None or owner in allowed):
            kept_previous[tp] = owner
    return Problem(checked_speeds, checked_capacity, kept_previous, ordered_members)
