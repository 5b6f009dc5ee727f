"""ShareGroupDescribe (Kafka API 77, v1) and DescribeShareGroupOffsets (API 90, v0-v1) on
aiokafka's protocol classes, and what the sidecar takes from their responses.

Neither Python client ships these requests. aiokafka negotiates the version per connection:
a broker without share groups raises ``IncompatibleBrokerVersion``. The responses are bytes
from the network: :func:`share_group_description` and :func:`share_offsets` take any decoded
shape and return a value or raise :class:`ShareResponseError`, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from assignor.types import TopicPartition, partitions_by_topic
from contract.kafka_client.kafka_uuid import Uuid

GROUP_ID_NOT_FOUND = 69  # a share group nobody has joined yet


_TEXT = CompactString("utf-8")
_TOPIC_PARTITIONS = CompactArray(
    ("topic_id", Uuid),
    ("topic_name", _TEXT),
    ("partitions", CompactArray(Int32)),
    ("tags", TaggedFields),
)
_MEMBER = (
    ("member_id", _TEXT),
    ("rack_id", _TEXT),
    ("member_epoch", Int32),
    ("client_id", _TEXT),
    ("client_host", _TEXT),
    ("subscribed_topic_names", CompactArray(_TEXT)),
    ("assignment", Schema(("topic_partitions", _TOPIC_PARTITIONS), ("tags", TaggedFields))),
    ("tags", TaggedFields),
)


# Class names follow Kafka's and aiokafka's <Name>_v<version> convention.
class ShareGroupDescribeResponse_v1(Response):
    API_KEY = 77
    API_VERSION = 1
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "groups",
            CompactArray(
                ("error_code", Int16),
                ("error_message", _TEXT),
                ("group_id", _TEXT),
                ("group_state", _TEXT),
                ("group_epoch", Int32),
                ("assignment_epoch", Int32),
                ("assignor_name", _TEXT),
                ("members", CompactArray(*_MEMBER)),
                ("authorized_operations", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class ShareGroupDescribeRequest_v1(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 77
    API_VERSION = 1
    RESPONSE_TYPE = ShareGroupDescribeResponse_v1
    SCHEMA = Schema(
        ("group_ids", CompactArray(_TEXT)),
        ("include_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class ShareGroupDescribeRequest(Request[ShareGroupDescribeRequest_v1]):
    """The description of share groups (send it to their coordinator)."""

    API_KEY = 77

    def __init__(self, groups: Iterable[str]) -> None:
        self._groups = list(groups)

    def build(
        self, request_struct_class: type[ShareGroupDescribeRequest_v1]
    ) -> ShareGroupDescribeRequest_v1:
        return request_struct_class(self._groups, False, {})


def _offsets_response(with_lag: bool) -> Schema:
    partition: tuple[tuple[str, Any], ...] = (
        ("partition_index", Int32),
        ("start_offset", Int64),
        ("leader_epoch", Int32),
        *((("lag", Int64),) if with_lag else ()),
        ("error_code", Int16),
        ("error_message", _TEXT),
        ("tags", TaggedFields),
    )
    return Schema(
        ("throttle_time_ms", Int32),
        (
            "groups",
            CompactArray(
                ("group_id", _TEXT),
                (
                    "topics",
                    CompactArray(
                        ("topic_name", _TEXT),
                        ("topic_id", Uuid),
                        ("partitions", CompactArray(*partition)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("error_code", Int16),
                ("error_message", _TEXT),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DescribeShareGroupOffsetsResponse_v0(Response):
    API_KEY = 90
    API_VERSION = 0
    SCHEMA = _offsets_response(with_lag=False)


class DescribeShareGroupOffsetsResponse_v1(Response):
    API_KEY = 90
    API_VERSION = 1
    SCHEMA = _offsets_response(with_lag=True)


_OFFSETS_REQUEST = Schema(
    (
        "groups",
        CompactArray(
            ("group_id", _TEXT),
            (
                "topics",
                CompactArray(
                    ("topic_name", _TEXT),
                    ("partitions", CompactArray(Int32)),
                    ("tags", TaggedFields),
                ),
            ),
            ("tags", TaggedFields),
        ),
    ),
    ("tags", TaggedFields),
)


class DescribeShareGroupOffsetsRequest_v0(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 90
    API_VERSION = 0
    RESPONSE_TYPE = DescribeShareGroupOffsetsResponse_v0
    SCHEMA = _OFFSETS_REQUEST


class DescribeShareGroupOffsetsRequest_v1(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 90
    API_VERSION = 1
    RESPONSE_TYPE = DescribeShareGroupOffsetsResponse_v1
    SCHEMA = _OFFSETS_REQUEST


OffsetsRequestStruct: TypeAlias = (
    DescribeShareGroupOffsetsRequest_v0 | DescribeShareGroupOffsetsRequest_v1
)


class DescribeShareGroupOffsetsRequest(Request[OffsetsRequestStruct]):
    """A share group's start offset (and, from v1, lag) of each given partition."""

    API_KEY = 90

    def __init__(self, group: str, partitions: Iterable[tuple[str, int]]) -> None:
        self._group = group
        self._topics: list[tuple[str, list[int], dict[int, bytes]]] = [
            (topic, ps, {}) for topic, ps in partitions_by_topic(partitions)
        ]

    def build(self, request_struct_class: type[OffsetsRequestStruct]) -> OffsetsRequestStruct:
        return request_struct_class([(self._group, self._topics, {})], {})


class ShareResponseError(ValueError):
    """A share-group response that answers with an error or is shaped otherwise."""


@dataclass(frozen=True)
class ShareGroupDescription:
    """A share group as its coordinator describes it."""

    state: str
    member_ids: frozenset[str]
    assignor: str


@dataclass(frozen=True)
class ShareOffsets:
    """A share group's offsets: where each partition's share starts (records before it are
    all acknowledged), the lag where the broker knows it (KIP-1226), and topic ids."""

    start: Mapping[TopicPartition, int] = field(default_factory=dict)
    lag: Mapping[TopicPartition, int] = field(default_factory=dict)
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    # The group exists (False: nobody has joined it yet, so nothing is owed).
    exists: bool = True


def share_group_description(response: Any, group: str) -> ShareGroupDescription:
    """``group``'s state, member ids and assignor in a ShareGroupDescribe response."""
    try:
        for error, message, group_id, state, _e, _a, assignor, members, *_ in response.groups:
            if group_id != group:
                continue
            if error == GROUP_ID_NOT_FOUND:  # nobody has joined it yet
                return ShareGroupDescription("Empty", frozenset(), "")
            if error:
                raise ShareResponseError(f"ShareGroupDescribe error {error}: {message}")
            if not isinstance(state, str) or not isinstance(assignor, str):
                raise ShareResponseError("ShareGroupDescribe: state or assignor is not a string")
            ids = frozenset(str(member[0]) for member in members or ())
            return ShareGroupDescription(state, ids, assignor)
    except (TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, ShareResponseError):
            raise
        raise ShareResponseError(f"ShareGroupDescribe response is malformed: {exc}") from None
    raise ShareResponseError(f"ShareGroupDescribe response does not name group {group!r}")


def share_offsets(response: Any, group: str) -> ShareOffsets:
    """``group``'s offsets in a DescribeShareGroupOffsets response (v0 has no lag)."""
    start: dict[TopicPartition, int] = {}
    lag: dict[TopicPartition, int] = {}
    ids: dict[str, str] = {}
    with_lag = getattr(response, "API_VERSION", 0) >= 1
    try:
        for group_id, topics, error, message, _tags in response.groups:
            if group_id != group:
                continue
            if error == GROUP_ID_NOT_FOUND:
                return ShareOffsets(exists=False)
            if error:
                raise ShareResponseError(f"DescribeShareGroupOffsets error {error}: {message}")
            for name, topic_id, partitions, _topic_tags in topics or ():
                ids[str(name)] = str(topic_id)
                for entry in partitions or ():
                    index, offset = int(entry[0]), int(entry[1])
                    partition_lag = int(entry[3]) if with_lag else -1
                    tp = TopicPartition(str(name), index)
                    if offset >= 0:  # -1: the group has not started reading it
                        start[tp] = offset
                    if partition_lag >= 0:  # -1: the broker does not know it
                        lag[tp] = partition_lag
            return ShareOffsets(start, lag, ids)
    except (TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, ShareResponseError):
            raise
        raise ShareResponseError(
            f"DescribeShareGroupOffsets response is malformed: {exc}"
        ) from None
    raise ShareResponseError(f"DescribeShareGroupOffsets response does not name group {group!r}")
