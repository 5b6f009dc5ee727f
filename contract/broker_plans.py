"""The plans the sidecar publishes for the broker-side assignor (KIP-848 groups).

Each group has a plans topic of its own, ``<plans topic>.<group>`` (compacted; by default
``_autoscaler_plans.<group>``), so that an ACL on that one topic decides who may steer the
group; the assignor reads every topic so named and refuses a plan whose group is not its
topic's. One record per group (keyed by the group id): the value is UTF-8
JSON ``{"format": 1, "group": G, "written_ms": T, "members": {KEY: {TOPIC_ID: [partitions]}}}``
where KEY is a member's ``group.instance.id`` (known before the member joins, so a plan can be
waiting for it) or else its member id, and TOPIC_ID is Kafka's topic id in its usual base64
form: the assignor inside the broker sees topic ids, never names, and no group id. The broker
follows a plan only while it names exactly the group's members and is younger than its
``autoscaler.plans.max.age.ms`` (``assignor/broker/java``, ``Plan.java``, reads this format).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence

from assignor.types import TopicPartition

PLANS_TOPIC = "_autoscaler_plans"
PLAN_FORMAT = 1
MAX_PLAN_BYTES = 4 * 1024 * 1024
MAX_MEMBER_KEY_CHARS = 255


# Kafka's topic names: these characters, at most 249 of them.
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


class PlanError(ValueError):
    """A plan that the broker-side assignor would refuse."""


def plans_topic_for(group: str, plans_topic: str = PLANS_TOPIC) -> str:
    """The topic ``group``'s plans are published to and read from: ``<plans_topic>.<group>``,
    which must be a Kafka topic name (so the group id is letters, digits, '.', '_' and '-')."""
    name = f"{plans_topic}.{group}"
    if not group or TOPIC_NAME.fullmatch(name) is None:
        raise PlanError(f"group id must be {group_id_rule(plans_topic)}, got {group!r}")
    return name


def group_id_rule(plans_topic: str = PLANS_TOPIC) -> str:
    """What a group id must be for :func:`plans_topic_for`, in words."""
    most = 249 - len(plans_topic) - 1
    return (
        f"1 to {most} letters, digits, '.', '_' or '-' (its plans topic is {plans_topic}.<group>)"
    )


def check_topic_id(topic_id: str) -> str:
    """The Kafka topic id ``topic_id`` (16 bytes in unpadded base64) in the URL-safe alphabet
    Kafka's own ``Uuid`` reads (confluent-kafka prints the standard one)."""
    url_safe = topic_id.replace("+", "-").replace("/", "_") if isinstance(topic_id, str) else ""
    try:
        raw = base64.b64decode(url_safe + "==", altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(url_safe) != 22 or len(raw) != 16:
        raise PlanError(f"topic id must be 22 characters of base64 (16 bytes), got {topic_id!r}")
    return url_safe


def encode_plan(
    group: str,
    assignment: Mapping[TopicPartition, str],
    members: Sequence[str],
    topic_ids: Mapping[str, str],
    *,
    written_ms: int,
) -> tuple[bytes, bytes]:
    """The plans-topic record (key, value) of ``assignment`` (partition -> member key) for a
    group of exactly ``members`` (those given nothing included); topic names are translated to
    ids through ``topic_ids``."""
    if not group:
        raise PlanError("group must be a non-empty group id")
    if not members:
        raise PlanError("members must name at least one member")
    body: dict[str, dict[str, list[int]]] = {}
    for key in members:
        if not key or len(key) > MAX_MEMBER_KEY_CHARS:
            raise PlanError(f"member key must be 1 to {MAX_MEMBER_KEY_CHARS} characters: {key!r}")
        body[key] = {}
    for tp, owner in sorted(assignment.items()):
        if owner not in body:
            raise PlanError(f"partition {tp.topic}-{tp.partition} goes to {owner!r}, not a member")
        if tp.topic not in topic_ids:
            raise PlanError(f"no topic id known for topic {tp.topic!r}")
        body[owner].setdefault(check_topic_id(topic_ids[tp.topic]), []).append(tp.partition)
    document = {"format": PLAN_FORMAT, "group": group, "written_ms": written_ms, "members": body}
    value = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
    if len(value) > MAX_PLAN_BYTES:
        raise PlanError(f"plan is {len(value)} bytes; the assignor reads at most {MAX_PLAN_BYTES}")
    return group.encode(), value
