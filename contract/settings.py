"""The settings the consumers and the sidecar share (the same fields, ``AUTOSCALER_*``
variables and checks), below both: neither imports the other for them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, NoReturn

from assignor import DEFAULT_HEURISTIC, HEURISTIC_NAMES
from assignor.validation import TOPIC_NAME_RULE, is_finite_number, is_topic_name
from contract.security import CREDENTIAL_FIELDS, aiokafka_options, check_security
from contract.snapshot import UNITS, speeds_topic

ENV_PREFIX = "AUTOSCALER_"
# ``--capacity auto``: the sidecar sizes with what the consumers measure they drain, from
# ``capacity_initial`` (or these conservative values per unit) until it has a measurement.
CAPACITY_AUTO = "auto"
# consumer: a partition has one member; share: KIP-932 share groups, members share partitions.
GROUP_TYPES = ("consumer", "share")
# read_committed: only what committed transactions wrote (Kafka's transactional producers,
# Kafka Streams, Flink, Debezium, Connect's exactly-once sources); read_uncommitted: all.
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)
INITIAL_CAPACITY = {"records/s": 1000.0, "bytes/s": 1_000_000.0}
DEFAULT_WAIT_TIME_SECS = 5.0


class ConfigError(ValueError):
    """A configuration value out of range, naming the field and its environment variable."""


def setting(
    help: str, default: Any = MISSING, default_factory: Any = MISSING, *, secret: bool = False
) -> Any:
    """A settings field with what it means and accepts (``help``): the one text the flags'
    ``--help`` and the configuration reference are made from. A ``secret`` one is left
    out of the settings' repr (what a log line would show)."""
    metadata = {"help": help, "secret": secret}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=metadata, repr=not secret)
    return field(default=default, metadata=metadata, repr=not secret)


def setting_help(f: Field[Any]) -> str:
    """What a settings field means and accepts (:func:`setting`)."""
    return str(f.metadata.get("help", ""))


def env_name(field_name: str) -> str:
    """``batch_bytes`` -> ``AUTOSCALER_BATCH_BYTES``."""
    return ENV_PREFIX + field_name.upper()


def without_credentials(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the ``AUTOSCALER_*`` credential variables (what a process the
    sidecar starts must not inherit: :data:`contract.security.CREDENTIAL_FIELDS`)."""
    secret = {env_name(name) for name in CREDENTIAL_FIELDS}
    return {name: value for name, value in environ.items() if name not in secret}


@dataclass(frozen=True)
class GroupSettings:
    """What the consumers and the sidecar share: the same fields, the same ``AUTOSCALER_*``
    variables, the same checks. Subclasses say how a field is named in messages."""

    bootstrap_servers: str = setting("Kafka brokers, host:port[,host:port...]")
    group: str = setting("the consumer group")
    topics: tuple[str, ...] = setting("the group's topics, comma-separated")
    capacity: float = setting(
        "what one consumer drains, in capacity_unit (a number > 0), or auto: "
        "measured by the consumers while a backlog waits (see capacity_initial)"
    )
    capacity_unit: str = setting(
        "records/s, or bytes/s (measured from log sizes where the cluster has DescribeLogDirs)",
        "records/s",
    )
    heuristic: str = setting(
        "the bin-packing heuristic, the same on every consumer and the sidecar "
        "(repair, mbfp, ...; see the heuristics page)",
        DEFAULT_HEURISTIC,
    )
    snapshot_topic: str = setting(
        "the topic the sidecar publishes speed snapshots to (empty: <group>.autoscaler.speeds)",
        "",
    )
    # The sidecar reads it too: lag up to this many seconds of arrivals is a batch being
    # built, not a backlog (assignor.backlog).
    wait_time_secs: float = setting(
        "the consumers' batch wait in seconds, [0.01, 3600]: a batch is written when full or "
        "this old",
        DEFAULT_WAIT_TIME_SECS,
    )
    capacity_initial: float = setting(
        "with capacity auto: what one consumer is taken to drain until measured, >= 0 "
        "(0: 1000 records/s or 1000000 bytes/s)",
        0.0,
    )
    group_type: str = setting(
        "consumer (a consumer group: a partition has one member) or share (a KIP-932 share "
        "group: members share partitions and acknowledge each record; the sidecar sizes it by "
        "its load alone, up to the brokers' group.share.max.size, and SDK members write each "
        "record once by merging on topic, partition and offset)",
        "consumer",
    )
    isolation_level: str = setting(
        "read_committed (the records of committed transactions and of non-transactional "
        "producers; a partition is read up to its last stable offset, and the sidecar's lag "
        "is measured to it) or read_uncommitted (every record, aborted transactions' too, "
        "up to the high watermark)",
        READ_COMMITTED,
    )
    # Security: every Kafka client of the consumers and the sidecar (contract.security).
    security_protocol: str = setting("PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", "PLAINTEXT")
    sasl_mechanism: str | None = setting(
        "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, GSSAPI or OAUTHBEARER; required with SASL_*",
        None,
    )
    sasl_plain_username: str | None = setting(
        "the SASL user name (PLAIN and SCRAM mechanisms)", None
    )
    sasl_plain_password: str | None = setting(
        "the SASL password (or sasl_password_file; never logged)", None, secret=True
    )
    sasl_password_file: str | None = setting(
        "a file whose first line is the SASL password (a mounted secret)", None
    )
    sasl_oauth_token_file: str | None = setting(
        "with OAUTHBEARER: a file holding the access token, read again at each "
        "authentication (rotated by an agent)",
        None,
    )
    ssl_cafile: str | None = setting(
        "a CA certificate file (PEM) to check the brokers' certificates with", None
    )
    ssl_certfile: str | None = setting(
        "mutual TLS: this client's certificate (PEM), with ssl_keyfile", None
    )
    ssl_keyfile: str | None = setting("mutual TLS: this client's private key (PEM)", None)

    def label(self, name: str) -> str:
        """How field ``name`` is called in an error message."""
        return f"{name} ({env_name(name)})"

    def shared_environment(self) -> dict[str, str]:
        """The shared fields as ``AUTOSCALER_*`` variables: what a process started with this
        environment (a consumer the sidecar's local scaler starts) reads back as the same
        settings, however they were given here (flags or variables). Credentials are not
        shared (:data:`contract.security.CREDENTIAL_FIELDS`): each process has its own."""
        environment: dict[str, str] = {}
        for f in fields(GroupSettings):
            value = getattr(self, f.name)
            if value is None or f.name in CREDENTIAL_FIELDS:  # unset stays unset; no secrets
                continue
            environment[env_name(f.name)] = (
                ",".join(value) if isinstance(value, tuple) else str(value)
            )
        return environment

    def kafka_client_options(self) -> dict[str, Any]:
        """The security options of every aiokafka client (consumer, producer, admin)."""
        return aiokafka_options(self)

    def _fail(self, name: str, accepted: str) -> NoReturn:
        raise ConfigError(f"{self.label(name)} must be {accepted}, got {getattr(self, name)!r}")

    def _check_group(self) -> None:
        """Check the shared fields; derive the default snapshot topic."""
        if not isinstance(self.bootstrap_servers, str) or not all(
            _is_host_port(s) for s in self.bootstrap_servers.split(",")
        ):
            self._fail(
                "bootstrap_servers", "a comma-separated list of host:port, port in [1, 65535]"
            )
        if self.group_type not in GROUP_TYPES:
            self._fail("group_type", f"one of {', '.join(GROUP_TYPES)}")
        if self.isolation_level not in ISOLATION_LEVELS:
            self._fail("isolation_level", f"one of {', '.join(ISOLATION_LEVELS)}")
        if not isinstance(self.group, str) or not self.group.strip():
            self._fail("group", "a non-empty consumer group id")
        if not self.topics or not all(is_topic_name(t) for t in self.topics):
            self._fail("topics", f"one or more topic names of {TOPIC_NAME_RULE}")
        if bad_number(self.capacity, minimum=0.0, exclusive=True):
            self._fail("capacity", "a finite number > 0 (records/s or bytes/s one consumer drains)")
        if bad_number(self.capacity_initial, minimum=0.0):
            self._fail("capacity_initial", "a finite number >= 0 (0: the default of the unit)")
        if self.capacity_unit not in UNITS:
            self._fail("capacity_unit", f"one of {', '.join(UNITS)}")
        if self.heuristic not in HEURISTIC_NAMES:
            self._fail("heuristic", f"one of {', '.join(HEURISTIC_NAMES)}")
        if bad_number(self.wait_time_secs, minimum=0.01) or self.wait_time_secs > 3600:
            self._fail("wait_time_secs", "a number of seconds in [0.01, 3600]")
        check_security(self, self._fail)
        if not self.snapshot_topic:
            object.__setattr__(self, "snapshot_topic", speeds_topic(self.group))
        if not is_topic_name(self.snapshot_topic):
            self._fail(
                "snapshot_topic",
                f"a topic name of {TOPIC_NAME_RULE} (the default, "
                "<group>.autoscaler.speeds, is invalid when the group id has other characters)",
            )


def is_capacity_auto(raw: object) -> bool:
    """Whether a raw capacity setting asks for the measured one ("auto", any case)."""
    return isinstance(raw, str) and raw.strip().lower() == CAPACITY_AUTO


def capacity_setting(raw: object, initial: object, unit: object) -> tuple[object, bool]:
    """The capacity to start with and whether it is measured (``raw`` is "auto"): then the
    initial one (``initial`` when > 0, else the unit's default). Anything else is returned
    as given, for the field's own check."""
    if not is_capacity_auto(raw):
        return raw, False
    if is_finite_number(initial) and initial > 0:
        return float(initial), True
    return INITIAL_CAPACITY.get(str(unit), INITIAL_CAPACITY["records/s"]), True


def _is_host_port(address: str) -> bool:
    """``host:port`` (``[v6]:port`` too) with a port in [1, 65535]."""
    host, sep, port = address.strip().rpartition(":")
    return bool(sep and host) and port.isascii() and port.isdigit() and 1 <= int(port) <= 65535


def bad_number(value: object, minimum: float, exclusive: bool = False) -> bool:
    """Not a finite number, or below ``minimum`` (at or below it if ``exclusive``)."""
    if not is_finite_number(value):
        return True
    return value <= minimum if exclusive else value < minimum
