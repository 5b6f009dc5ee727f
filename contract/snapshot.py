"""The speed snapshot: what the sidecar measured, as the SDK's assignor reads it.

One JSON object per Kafka record on the speeds topic (``<group>.autoscaler.speeds`` unless
configured), columnar per topic so 10,000 partitions stay far below Kafka's default 1 MB
record limit::

    {"version": 1, "group": "orders-sink", "sequence": 42, "timestamp": 1795339869.04,
     "unit": "records/s",
     "topics": {"orders": {"partition": [0, 1], "speed": [812.5, 3.25], "lag": [120, 0],
                           "end_offset": [98211, 1200]}},
     "drain": {"seconds": 30, "allowance_seconds": 5}, "capacity": 2310.5}

``drain`` (optional) is the rule the sidecar sized the group by (assignor.backlog); the
assignor packs by the same rule so the consumers added for a backlog get partitions.
``capacity`` (optional) is what one consumer drains as the consumers measured it, when the
sidecar sizes with that (``--capacity auto``): the assignor packs by it and a member judges
its own overload by it, instead of the value it was configured with.

Pure: encoding, decoding with field-by-field validation, freshness. No I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from assignor import TopicPartition
from assignor.backlog import DrainRule
from assignor.validation import is_finite_number, is_int64

SNAPSHOT_VERSION = 1
UNITS = ("records/s", "bytes/s")
SPEEDS_TOPIC_SUFFIX = ".autoscaler.speeds"


class SnapshotError(ValueError):
    """A snapshot that cannot be used, with the field at fault in the message."""


@dataclass(frozen=True)
class PartitionStat:
    """What was measured for one partition."""

    speed: float
    lag: float  # in the speed's quantity: records, or bytes of log when unit is bytes/s
    end_offset: int


@dataclass(frozen=True)
class Snapshot:
    """Write speeds of a group's partitions at one moment."""

    group: str
    sequence: int
    timestamp: float
    unit: str
    partitions: Mapping[TopicPartition, PartitionStat] = field(default_factory=dict)
    drain: DrainRule | None = None
    capacity: float | None = None
    version: int = SNAPSHOT_VERSION

    @property
    def speeds(self) -> dict[TopicPartition, float]:
        """Partition -> speed, for the heuristics."""
        return {tp: stat.speed for tp, stat in self.partitions.items()}

    @property
    def lags(self) -> dict[TopicPartition, float]:
        """Partition -> lag, for lag-aware heuristics."""
        return {tp: stat.lag for tp, stat in self.partitions.items()}

    def age(self, now: float) -> float:
        """Seconds since the snapshot was taken (negative if it claims to be from the future)."""
        return now - self.timestamp

    def newer_than(self, other: Snapshot | None) -> bool:
        """Taken after ``other`` (by timestamp, then sequence); anything is newer than None."""
        return other is None or (self.timestamp, self.sequence) > (other.timestamp, other.sequence)

    def is_fresh(self, now: float, max_age_s: float) -> bool:
        """Taken at most ``max_age_s`` ago (and not more than that in the future: clock skew)."""
        return abs(self.age(now)) <= max_age_s

    def encode(self) -> bytes:
        """The JSON record value."""
        topics: dict[str, dict[str, list[float]]] = {}
        for tp, stat in sorted(self.partitions.items()):
            columns = topics.setdefault(
                tp.topic, {"partition": [], "speed": [], "lag": [], "end_offset": []}
            )
            columns["partition"].append(tp.partition)
            columns["speed"].append(round(stat.speed, 3))
            columns["lag"].append(stat.lag)
            columns["end_offset"].append(stat.end_offset)
        body: dict[str, Any] = {
            "version": self.version,
            "group": self.group,
            "sequence": self.sequence,
            "timestamp": self.timestamp,
            "unit": self.unit,
            "topics": topics,
        }
        if self.drain is not None:
            body["drain"] = {
                "seconds": self.drain.drain_seconds,
                "allowance_seconds": self.drain.allowance_seconds,
            }
        if self.capacity is not None:
            body["capacity"] = round(self.capacity, 3)
        return json.dumps(body, separators=(",", ":")).encode()


def speeds_topic(group: str) -> str:
    """Default speeds topic of ``group``."""
    return group + SPEEDS_TOPIC_SUFFIX


def _non_negative(value: object, integer: bool) -> bool:
    """An integer (or, unless ``integer``, a finite number) >= 0."""
    if integer:
        return is_int64(value) and value >= 0
    return is_finite_number(value) and value >= 0


def _number(raw: Mapping[str, Any], key: str, where: str, *, integer: bool = False) -> float:
    value: Any = raw.get(key)
    if not _non_negative(value, integer):
        kind = "an integer" if integer else "a finite number"
        raise SnapshotError(f"{where}{key} must be {kind} >= 0, got {value!r}")
    return float(value)


def _column(columns: Mapping[str, Any], topic: str, name: str, integer: bool) -> list[Any]:
    values = columns.get(name)
    where = f"topics[{topic!r}].{name}"
    if not isinstance(values, list):
        raise SnapshotError(f"{where} must be a list")
    for index, value in enumerate(values):
        if not _non_negative(value, integer):
            what = "an integer" if integer else "a finite number"
            raise SnapshotError(f"{where}[{index}] must be {what} >= 0, got {value!r}")
    return values


def _decode_columns(topic: str, columns: Mapping[str, Any]) -> dict[TopicPartition, PartitionStat]:
    numbers = _column(columns, topic, "partition", True)
    speeds = _column(columns, topic, "speed", False)
    lags = _column(columns, topic, "lag", False)
    ends = _column(columns, topic, "end_offset", True)
    if not len(numbers) == len(speeds) == len(lags) == len(ends):
        raise SnapshotError(f"topics[{topic!r}] columns must have equal lengths")
    if len(set(numbers)) != len(numbers):
        raise SnapshotError(f"topics[{topic!r}].partition lists a partition twice")
    return {
        TopicPartition(topic, p): PartitionStat(float(s), float(lag), end)
        for p, s, lag, end in zip(numbers, speeds, lags, ends, strict=True)
    }


def _decode_drain(raw: object) -> DrainRule | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SnapshotError(f"drain must be an object of seconds, allowance_seconds, got {raw!r}")
    seconds = _number(raw, "seconds", "drain.")
    if seconds <= 0:
        raise SnapshotError(f"drain.seconds must be a finite number > 0, got {seconds!r}")
    return DrainRule(seconds, _number(raw, "allowance_seconds", "drain."))


def newest_of_group(values: Iterable[bytes | None], group: str) -> Snapshot | None:
    """The newest valid snapshot of ``group`` among record values (malformed ones and other
    groups' skipped): what a restarted sidecar reads back of its previous incarnation."""
    newest: Snapshot | None = None
    for value in values:
        try:
            snapshot = decode(value or b"")
        except SnapshotError:
            continue
        if snapshot.group == group and snapshot.newer_than(newest):
            newest = snapshot
    return newest


def decode(data: bytes | str) -> Snapshot:
    """Parse and validate one snapshot record; SnapshotError names the bad field."""
    try:
        raw = json.loads(data)
    except ValueError as exc:  # JSONDecodeError, bad UTF-8, an integer of over 4300 digits
        raise SnapshotError(f"snapshot is not JSON: {exc}") from None
    except RecursionError:
        raise SnapshotError("snapshot is nested too deeply to be one") from None
    if not isinstance(raw, dict):
        raise SnapshotError("snapshot must be a JSON object")
    if raw.get("version") != SNAPSHOT_VERSION:
        raise SnapshotError(f"version must be {SNAPSHOT_VERSION}, got {raw.get('version')!r}")
    group = raw.get("group")
    if not isinstance(group, str) or not group:
        raise SnapshotError(f"group must be a non-empty string, got {group!r}")
    unit = raw.get("unit")
    if unit not in UNITS:
        raise SnapshotError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
    topics = raw.get("topics")
    if not isinstance(topics, dict):
        raise SnapshotError("topics must be an object of topic -> columns")
    partitions: dict[TopicPartition, PartitionStat] = {}
    for topic, columns in topics.items():
        if not topic or not isinstance(columns, dict):
            raise SnapshotError(f"topics[{topic!r}] must be an object of columns")
        partitions.update(_decode_columns(topic, columns))
    return Snapshot(
        group=group,
        sequence=int(_number(raw, "sequence", "", integer=True)),
        timestamp=float(_number(raw, "timestamp", "")),
        unit=unit,
        partitions=partitions,
        drain=_decode_drain(raw.get("drain")),
        capacity=_decode_capacity(raw.get("capacity")),
    )


def _decode_capacity(raw: object) -> float | None:
    if raw is None:
        return None
    if not (is_finite_number(raw) and raw > 0):
        raise SnapshotError(f"capacity must be a finite number > 0, got {raw!r}")
    return float(raw)
