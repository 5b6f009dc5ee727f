"""A share group's delivery limit (``share.delivery.count.limit``, KIP-932 and KIP-1240): a
record acquired that many times and then released, or whose lock runs out, is archived by
Kafka and never delivered again. A member that stops before it could write a record at its
last delivery must not release it: that would drop it. These helpers read the limit and
tell such records apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from consumer_sdk.share.isolation import described_group_setting

GROUP_SETTING = "share.delivery.count.limit"
# Kafka's default (group.share.delivery.count.limit) when the group does not say.
DEFAULT_LIMIT = 5


def delivery_limit(admin: Any, group: str, *, timeout_s: float) -> int:
    """``group``'s delivery limit as the brokers describe it through the confluent-kafka
    AdminClient ``admin`` (Kafka's default when not said); a failure is raised as it is."""
    value = described_group_setting(admin, group, GROUP_SETTING, timeout_s=timeout_s)
    return int(value) if value is not None and value.isdigit() else DEFAULT_LIMIT


def split_last_deliveries(records: Sequence[Any], limit: int) -> tuple[list[Any], list[Any]]:
    """``records`` as (below the limit: safe to release, at their last delivery: archived if
    released or left to their lock). A record whose client does not say its delivery count
    counts as a first delivery."""
    below: list[Any] = []
    last: list[Any] = []
    for record in records:
        count = getattr(record, "delivery_count", None)
        delivered = count() if callable(count) else None
        (last if isinstance(delivered, int) and delivered >= limit else below).append(record)
    return below, last
