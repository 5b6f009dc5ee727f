"""Kafka consumer properties by their Java names (``kafka_properties``), as the SDK's aiokafka
client takes them.

Users tune a consumer with the names Kafka documents (``fetch.min.bytes=65536``); aiokafka
takes keyword arguments of its own. Only properties the SDK leaves to the user are accepted,
each with its range; a property the SDK sets itself names the setting that owns it (the
group, commits after each write, the isolation level, the security settings, ...), and
any other is refused with the list of those accepted. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

# Java name -> (aiokafka keyword, lowest, highest): integers all.
TUNABLE: dict[str, tuple[str, int, int]] = {
    "fetch.min.bytes": ("fetch_min_bytes", 1, 1 << 30),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", 0, 60_000),
    "request.timeout.ms": ("request_timeout_ms", 1_000, 3_600_000),
    "retry.backoff.ms": ("retry_backoff_ms", 0, 60_000),
    "metadata.max.age.ms": ("metadata_max_age_ms", 1_000, 86_400_000),
    "connections.max.idle.ms": ("connections_max_idle_ms", 1_000, 86_400_000),
}
# Java name -> the SDK setting that owns it (empty: the SDK's own, not settable).
OWNED: dict[str, str] = {
    "bootstrap.servers": "bootstrap_servers",
    "group.id": "group",
    "client.id": "client_id",
    "client.rack": "client_rack",
    "isolation.level": "isolation_level",
    "auto.offset.reset": "auto_offset_reset",
    "session.timeout.ms": "session_timeout_ms",
    "heartbeat.interval.ms": "heartbeat_interval_ms",
    "max.poll.interval.ms": "max_poll_interval_ms",
    "fetch.max.bytes": "fetch_max_bytes",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "enable.auto.commit": "",  # offsets are committed after each write, never by a timer
    "max.partition.fetch.bytes": "",  # whole batches, held back by the fetch budget
    "partition.assignment.strategy": "",  # the autoscaler assignor
    "group.protocol": "",
}


class BadProperty(ValueError):
    """A property the SDK does not take, or a value out of its range (the message says
    what is accepted)."""


def aiokafka_properties(properties: Mapping[str, str]) -> dict[str, int]:
    """``properties`` (Java names, string values) as aiokafka keyword arguments."""
    converted: dict[str, int] = {}
    for name, raw in properties.items():
        if name in OWNED:
            owner = OWNED[name]
            raise BadProperty(
                f"free of {name}: the SDK sets it itself"
                + (f" from its setting {owner}" if owner else "")
            )
        if name not in TUNABLE:
            raise BadProperty(f"properties of {', '.join(sorted(TUNABLE))}; {name} is not one")
        keyword, lowest, highest = TUNABLE[name]
        try:
            value = int(str(raw).strip())
        except ValueError:
            value = lowest - 1
        if not lowest <= value <= highest:
            raise BadProperty(f"{name} as an integer in [{lowest}, {highest}]; got {raw!r}")
        converted[keyword] = value
    return converted


def parse_properties(raw: str) -> dict[str, str]:
    """``key=value[,key=value...]`` as a dict (what ``AUTOSCALER_KAFKA_PROPERTIES`` holds)."""
    pairs: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise BadProperty(f"key=value pairs separated by commas; {item.strip()!r} is not one")
        pairs[key.strip()] = value.strip()
    return pairs
