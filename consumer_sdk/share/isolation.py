"""A share group's isolation level: a group setting (``share.isolation.level``, KIP-932),
not a client one, and ``read_uncommitted`` unless someone sets it. A member reading for a
table that promises only committed records makes sure of it before it joins: it sets the
group's level to its own ``isolation_level`` (IncrementalAlterConfigs, idempotent), and when
it may not (no ALTER_CONFIGS on the group), it reads the level the group has and refuses to
start, in one line, if that is not the one asked for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from consumer_sdk.config import ConsumerConfig
from contract.security import librdkafka_options
from contract.settings import ConfigError

log = logging.getLogger(__name__)

GROUP_SETTING = "share.isolation.level"
TIMEOUT_S = 30.0


def ensure_isolation(admin: Any, group: str, wanted: str, *, timeout_s: float = TIMEOUT_S) -> None:
    """Make ``group``'s ``share.isolation.level`` be ``wanted`` through the confluent-kafka
    AdminClient ``admin``. ConfigError when it is not and cannot be made so; a transient
    failure (a broker down) is raised as it is, for the caller to retry."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entry = ConfigEntry(GROUP_SETTING, wanted, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    try:
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(timeout=timeout_s)
        log.info("share group %s reads with %s=%s", group, GROUP_SETTING, wanted)
        return
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        code = error.code() if isinstance(error, KafkaError) else None
        if code not in (
            KafkaError.GROUP_AUTHORIZATION_FAILED,
            KafkaError.CLUSTER_AUTHORIZATION_FAILED,
            KafkaError.POLICY_VIOLATION,
            KafkaError.INVALID_CONFIG,
        ):
            raise
        refusal = str(error)
    current = current_isolation(admin, group, timeout_s=timeout_s)
    if current == wanted:
        return
    raise ConfigError(
        f"isolation_level (AUTOSCALER_ISOLATION_LEVEL) is {wanted} but share group {group} "
        f"reads {current or 'read_uncommitted'} ({GROUP_SETTING}) and this member may not "
        f"change it ({refusal}): set it with kafka-configs.sh --entity-type groups "
        f"--entity-name {group} --alter --add-config {GROUP_SETTING}={wanted}, or grant the "
        f"member ALTER_CONFIGS on the group"
    )


def current_isolation(admin: Any, group: str, *, timeout_s: float = TIMEOUT_S) -> str | None:
    """The group's ``share.isolation.level`` as the brokers describe it (None: not said)."""
    return described_group_setting(admin, group, GROUP_SETTING, timeout_s=timeout_s)


def described_group_setting(
    admin: Any, group: str, name: str, *, timeout_s: float = TIMEOUT_S
) -> str | None:
    """``group``'s setting ``name`` as the brokers describe it through the confluent-kafka
    AdminClient ``admin`` (None: not said); a failure is raised as it is."""
    from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    for future in described.values():
        entry = future.result(timeout=timeout_s).get(name)
        if entry is not None:
            return str(entry.value)
    return None


def default_admin(config: ConsumerConfig) -> Any:
    """A confluent-kafka AdminClient connected as the member is."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(
        {"bootstrap.servers": config.bootstrap_servers, **librdkafka_options(config)}
    )


AdminFactory = Callable[[ConsumerConfig], Any]
