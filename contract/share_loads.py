"""The partition loads the sidecar publishes for the broker-side share-group assignor (KIP-932).

One record per share group on the share loads topic (compacted, keyed by the group id): the
value is UTF-8 JSON ``{"format": 1, "group": G, "written_ms": T, "loads": {TOPIC_ID: [load of
partition 0, load of partition 1, ...]}}`` where a load is in consumers: the partition's write
speed over one consumer's capacity, plus its backlog drained within the drain time. TOPIC_ID is
Kafka's topic id (the assignor inside the broker sees ids, never names, and no group id: it
takes the newest fresh loads naming every topic the group reads). ``assignor/broker/java``
(``ShareLoads.java``) reads this format and gives a partition at k times the group's mean load
per member k members.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from assignor.types import TopicPartition
from contract.broker_plans import MAX_PLAN_BYTES, PlanError, check_topic_id

SHARE_LOADS_TOPIC = "_autoscaler_share_loads"
SHARE_LOADS_FORMAT = 1
MAX_LOAD = 1_000_000.0
MAX_PARTITIONS = 1 << 16


def encode_share_loads(
    group: str,
    loads: Mapping[TopicPartition, float],
    partitions: Mapping[str, int],
    topic_ids: Mapping[str, str],
    *,
    written_ms: int,
) -> tuple[bytes, bytes]:
    """The share loads record (key, value) of ``loads`` (partition -> load in consumers) for a
    group reading topics of ``partitions`` partitions each; a partition ``loads`` lacks gets 0.
    Topic names are translated to ids through ``topic_ids``."""
    if not group:
        raise PlanError("group must be a non-empty group id")
    if not partitions:
        raise PlanError("partitions must name at least one topic")
    body: dict[str, list[float]] = {}
    for topic, count in sorted(partitions.items()):
        if not 1 <= count <= MAX_PARTITIONS:
            raise PlanError(f"topic {topic!r} has {count} partitions; accepted 1..{MAX_PARTITIONS}")
        if topic not in topic_ids:
            raise PlanError(f"no topic id known for topic {topic!r}")
        body[check_topic_id(topic_ids[topic])] = [0.0] * count
    for tp, load in loads.items():
        if tp.topic not in partitions or not 0 <= tp.partition < partitions[tp.topic]:
            raise PlanError(f"partition {tp.topic}-{tp.partition} is not one the group reads")
        if not (math.isfinite(load) and 0.0 <= load <= MAX_LOAD):
            raise PlanError(f"load of {tp.topic}-{tp.partition} must be in [0, {MAX_LOAD:g}]")
        body[check_topic_id(topic_ids[tp.topic])][tp.partition] = round(float(load), 6)
    document = {
        "format": SHARE_LOADS_FORMAT,
        "group": group,
        "written_ms": written_ms,
        "loads": body,
    }
    value = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
    if len(value) > MAX_PLAN_BYTES:
        raise PlanError(f"loads are {len(value)} bytes; over the {MAX_PLAN_BYTES} a broker reads")
    return group.encode(), value
