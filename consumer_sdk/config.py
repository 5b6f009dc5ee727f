"""Consumer configuration: keyword arguments, else ``AUTOSCALER_*`` environment variables.

Every field is validated with a message naming it (and its environment variable) and the
accepted range. Client security settings (SASL/SSL) pass through to aiokafka unchanged.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from assignor.cooperative import COOPERATIVE, PROTOCOLS
from assignor.member_data import RACK_NAME_RULE, is_rack_name
from assignor.validation import is_integer
from consumer_sdk.kafka_client.properties import (
    TUNABLE,
    BadProperty,
    aiokafka_properties,
    parse_properties,
)
from consumer_sdk.records.inflate import DEFAULT_MAX_RECORD_BATCH_BYTES
from contract.settings import (
    DEFAULT_WAIT_TIME_SECS,
    ConfigError,
    GroupSettings,
    bad_number,
    capacity_setting,
    env_name,
    is_capacity_auto,
    setting,
)

MIB = 1024 * 1024
# The freshness bound when neither it nor the batch wait is set: p99 under 1.5 s on a
# 2-core machine (benchmarks/lake/freshness.py).
DEFAULT_MAX_STALENESS_S = 1.0


def default_identity() -> str:
    """Pod name on Kubernetes (``POD_NAME`` or ``HOSTNAME``), else the host name."""
    return os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or socket.gethostname()


RECORD_PATHS = ("records", "columns")
REVOKE_MODES = ("release", "flush")
HANDOVERS = ("one-round", "two-round")
RACK_LOCALITIES = ("leader", "replicas")


@dataclass(frozen=True)
class ConsumerConfig(GroupSettings):
    """Everything an :class:`~consumer_sdk.consumer.AutoscalingConsumer` needs."""

    batch_bytes: int = setting(
        "a batch's size as it sits in memory (keys, values, headers and each record's "
        "fixed-width cells), [1024, 1073741824]: a batch is written when this full, "
        "wait_time_secs old or due by max_staleness_secs",
        16 * MIB,
    )
    max_staleness_secs: float | None = setting(
        "the freshness bound in seconds, [0.1, 3600]: a batch is written once its first "
        "record has waited this long less the sink's recent write time, so a record is in "
        "the table about this long after it was read; 0: off (wait_time_secs alone); unset: "
        "1, or off when wait_time_secs is set to anything but its default 5 (a batch wait "
        "chosen before this setting keeps its meaning)",
        None,
    )
    # Memory: up to this many batches plus the one filling.
    writes_in_flight: int = setting(
        "batches a staging sink (SparkTableSink) holds at once, [1, 8]: one stages while the "
        "one before it is still being written",
        2,
    )
    snapshot_max_age_secs: float = setting(
        "a speed snapshot older than this many seconds is ignored (and counted), [1, 86400]",
        30.0,
    )
    member_identity: str = setting(
        "this member's stable name, non-empty: name-<ordinal>, higher ordinals are emptied "
        "first; default: POD_NAME, HOSTNAME or the host name",
        default_factory=default_identity,
    )
    client_id: str = setting(
        "Kafka's client.id, what the brokers' quotas and request logs name this consumer by, "
        "up to 255 printable ASCII characters; empty: kafka-autoscaler-<group>-<member_identity>",
        "",
    )
    kafka_properties: Mapping[str, str] = setting(
        "key=value[,key=value...]: Kafka consumer properties by their Java names, of "
        + ", ".join(sorted(TUNABLE))
        + " (the SDK sets the others from its own settings)",
        default_factory=dict,
    )
    client_rack: str | None = setting(
        "this consumer's rack (zone), Kafka's client.rack: sent to the brokers (a fetch from "
        "an in-sync replica in it, KIP-392, where they allow it) and to the group's leader "
        "(a partition goes to a member in a rack it is local to, where one has room); "
        f"{RACK_NAME_RULE}; unset (or an empty variable): none",
        None,
    )
    rack_locality: str = setting(
        "where a consumer fetches a partition without leaving its rack: leader (the "
        "partition leader's rack only) or replicas (any in-sync replica's: the brokers set "
        "replica.selector.class to RackAwareReplicaSelector)",
        "leader",
    )
    session_timeout_ms: int = setting("Kafka's session.timeout.ms, [1000, 300000]", 10_000)
    # 1 s rather than the Kafka clients' 3 s brings consumers a scale-up adds into work up
    # to 2 s sooner, for one small request a second per member.
    heartbeat_interval_ms: int = setting(
        "Kafka's heartbeat.interval.ms, [50, session_timeout_ms): members hear of a "
        "rebalance at their next heartbeat",
        1_000,
    )
    # The SDK polls all the time, also with no partitions; only a write blocking the loop
    # this long counts.
    max_poll_interval_ms: int = setting("Kafka's max.poll.interval.ms, an integer >= 1000", 300_000)
    auto_offset_reset: str = setting(
        "where a partition with no committed offset starts: earliest or latest", "earliest"
    )
    leader_delay_secs: float = setting(
        "seconds the group leader waits before assigning, [0, 5]: non-zero only for the "
        "embedded broker",
        0.0,
    )
    metrics_port: int | None = setting(
        "port of this consumer's /metrics endpoint, [1, 65535]; unset: none", None
    )
    replan_after_secs: float = setting(
        "a member over its capacity asks the group to re-plan once its records are 5 % of "
        "this late, after at least 5 s over and at the latest after this long; again at most "
        "this often, [0, 3600]; 0: never",
        30.0,
    )
    rebalance_protocol: str = setting(
        "cooperative (only moving partitions stop) or eager", COOPERATIVE
    )
    handover: str = setting(
        "how a cooperative group moves a partition: one-round (its new owner gets it at "
        "once and reads it from the old owner's last commit, which marks it released) or "
        "two-round (the old owner revokes it in one round, the next hands it on); a group "
        "with a two-round member hands over in two rounds",
        "one-round",
    )
    leave_handover_secs: float = setting(
        "on stop, a cooperative member first hands its partitions to the others while it "
        "still reads them, for at most this many seconds, [0, 300]; 0: leave at once",
        10.0,
    )
    share_max_poll_records: int = setting(
        "with group_type share: records a poll returns at most, [1, 10000]; a poll's records "
        "stay locked until its write is acknowledged, and a share partition allows 2000 locks "
        "at once (share.partition.max.record.locks)",
        500,
    )
    record_path: str = setting(
        "columns (Arrow columns decoded natively per fetch) or records (a Record per record, "
        "as aiokafka builds them); sinks get the same Arrow table either way",
        "columns",
    )
    # Kafka limits a batch by its compressed size, so a small batch can inflate a
    # thousandfold.
    max_record_batch_bytes: int = setting(
        "what one producer batch may take once inflated and decoded, [1048576, 1073741824]: "
        "one past it goes to the dead-letter table and reading goes on (both record paths; "
        "the columns path reads a batch past a piece of min(4 MiB, batch_bytes) a piece at "
        "a time, so memory does not grow with it)",
        DEFAULT_MAX_RECORD_BATCH_BYTES,
    )
    # A response is held about three times over while it is decoded
    # (consumer_sdk.records.fetch_sizes).
    fetch_max_bytes: int | None = setting(
        "bytes one fetch response may hold (Kafka's fetch.max.bytes), [65536, 1073741824]; "
        "unset: derived from batch_bytes",
        None,
    )
    # A flush holds the whole group's rebalance round for a table write.
    revoke_mode: str = setting(
        "what a member does with partitions the group takes from it: release (give them up "
        "at once when the sink fences lost partitions; records not yet in a write are read "
        "again by the next owner) or flush (always so for a sink that does not fence: "
        "finish the writes in flight and commit; what no write took yet is written first "
        "in a two-round hand-over, dropped and read again by the next owner in a one-round "
        "one)",
        "release",
    )

    def __post_init__(self) -> None:
        self._check_group()
        self._check()

    @property
    def kafka_client_id(self) -> str:
        """The client.id the consumer connects with (``client_id`` resolved)."""
        return self.client_id or f"kafka-autoscaler-{self.group}-{self.member_identity}"

    @property
    def staleness_bound_s(self) -> float | None:
        """The freshness bound in effect (``max_staleness_secs`` resolved), None when off."""
        if self.max_staleness_secs is None:
            waits_by_default = self.wait_time_secs == DEFAULT_WAIT_TIME_SECS
            return DEFAULT_MAX_STALENESS_S if waits_by_default else None
        return self.max_staleness_secs or None

    def _check(self) -> None:
        if not (is_integer(self.batch_bytes) and 1024 <= self.batch_bytes <= 1024 * MIB):
            self._fail("batch_bytes", "an integer in [1024, 1073741824]")
        if not (
            is_integer(self.max_record_batch_bytes)
            and MIB <= self.max_record_batch_bytes <= 1024 * MIB
        ):
            self._fail("max_record_batch_bytes", "an integer in [1048576, 1073741824]")
        if self.fetch_max_bytes is not None and not (
            is_integer(self.fetch_max_bytes) and 65536 <= self.fetch_max_bytes <= 1024 * MIB
        ):
            self._fail("fetch_max_bytes", "an integer in [65536, 1073741824], or unset")
        if self.max_staleness_secs is not None and not (
            self.max_staleness_secs == 0
            or (not bad_number(self.max_staleness_secs, 0.1) and self.max_staleness_secs <= 3600)
        ):
            self._fail("max_staleness_secs", "a number of seconds in [0.1, 3600], 0 (off) or unset")
        if not (is_integer(self.writes_in_flight) and 1 <= self.writes_in_flight <= 8):
            self._fail("writes_in_flight", "an integer in [1, 8]")
        if (
            bad_number(self.snapshot_max_age_secs, minimum=1.0)
            or self.snapshot_max_age_secs > 86400
        ):
            self._fail("snapshot_max_age_secs", "a number of seconds in [1, 86400]")
        if not isinstance(self.member_identity, str) or not self.member_identity:
            self._fail("member_identity", "a non-empty string (pod name or StatefulSet ordinal)")
        if not (
            isinstance(self.client_id, str)
            and len(self.client_id) <= 255
            and all(" " <= c <= "~" for c in self.client_id)
        ):
            self._fail("client_id", "up to 255 printable ASCII characters, or empty")
        try:
            aiokafka_properties(self.kafka_properties)
        except BadProperty as exc:
            self._fail("kafka_properties", str(exc))
        if self.kafka_properties and self.group_type != "consumer":
            self._fail("kafka_properties", "empty with group_type share (a librdkafka client)")
        if self.client_rack is not None and not is_rack_name(self.client_rack):
            self._fail("client_rack", f"{RACK_NAME_RULE}, or unset")
        if self.rack_locality not in RACK_LOCALITIES:
            self._fail("rack_locality", f"one of {', '.join(RACK_LOCALITIES)}")
        if not 1000 <= self.session_timeout_ms <= 300_000:
            self._fail("session_timeout_ms", "in [1000, 300000]")
        if not 50 <= self.heartbeat_interval_ms < self.session_timeout_ms:
            self._fail("heartbeat_interval_ms", "in [50, session_timeout_ms)")
        if not (is_integer(self.max_poll_interval_ms) and self.max_poll_interval_ms >= 1000):
            self._fail("max_poll_interval_ms", "an integer number of ms >= 1000")
        if self.auto_offset_reset not in ("earliest", "latest"):
            self._fail("auto_offset_reset", "earliest or latest")
        if bad_number(self.replan_after_secs, minimum=0.0) or self.replan_after_secs > 3600:
            self._fail("replan_after_secs", "a number of seconds in [0, 3600] (0: never)")
        if not (
            is_integer(self.share_max_poll_records) and 1 <= self.share_max_poll_records <= 10_000
        ):
            self._fail("share_max_poll_records", "an integer in [1, 10000]")
        if self.rebalance_protocol not in PROTOCOLS:
            self._fail("rebalance_protocol", f"one of {', '.join(PROTOCOLS)}")
        if self.handover not in HANDOVERS:
            self._fail("handover", f"one of {', '.join(HANDOVERS)}")
        if self.revoke_mode not in REVOKE_MODES:
            self._fail("revoke_mode", f"one of {', '.join(REVOKE_MODES)}")
        if self.record_path not in RECORD_PATHS:
            self._fail("record_path", f"one of {', '.join(RECORD_PATHS)}")
        if bad_number(self.leave_handover_secs, minimum=0.0) or self.leave_handover_secs > 300:
            self._fail("leave_handover_secs", "a number of seconds in [0, 300] (0: leave at once)")
        if bad_number(self.leader_delay_secs, minimum=0.0) or self.leader_delay_secs > 5:
            self._fail("leader_delay_secs", "in [0, 5] (non-zero only for the embedded broker)")
        if self.metrics_port is not None and not 1 <= self.metrics_port <= 65535:
            self._fail("metrics_port", "a TCP port in [1, 65535], or unset for no endpoint")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> ConsumerConfig:
        """Keyword arguments win; missing fields come from ``AUTOSCALER_*`` variables."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in overrides:
                values[f.name] = overrides.pop(f.name)
            elif env_name(f.name) in env:
                values[f.name] = _parse(f.name, str(f.type), env[env_name(f.name)])
        if overrides:
            raise ConfigError(f"unknown configuration field(s): {', '.join(sorted(overrides))}")
        for required in ("bootstrap_servers", "group", "topics", "capacity"):
            if required not in values:
                raise ConfigError(f"{required} is required (argument or {env_name(required)})")
        # "auto" is the sidecar's (it measures); a consumer packs by the initial value.
        values["capacity"], _ = capacity_setting(
            values["capacity"],
            values.get("capacity_initial", 0.0),
            values.get("capacity_unit", "records/s"),
        )
        if isinstance(values["topics"], str):
            values["topics"] = _topics(values["topics"])
        values["topics"] = tuple(values["topics"])
        return cls(**values)


def _topics(raw: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in raw.split(",") if t.strip())


def _parse(name: str, type_name: str, raw: str) -> Any:
    """Convert an environment string to the field's type, naming the variable on failure."""
    if name == "capacity" and is_capacity_auto(raw):
        return raw
    if name == "client_rack" and not raw:
        return None  # the downward API gives "" where the pod has no zone label
    if name == "kafka_properties":
        try:
            return parse_properties(raw)
        except BadProperty as exc:
            raise ConfigError(f"{env_name(name)} must be {exc}") from None
    try:
        if type_name.startswith("int"):
            return int(raw)
        if type_name.startswith("float"):
            return float(raw)
    except ValueError:
        kind = "an integer" if type_name.startswith("int") else "a number"
        raise ConfigError(f"{env_name(name)} must be {kind}, got {raw!r}") from None
    if type_name.startswith("tuple"):
        return _topics(raw)
    return raw
