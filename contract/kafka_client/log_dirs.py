"""DescribeLogDirs (Kafka API 35, v0-v1) on aiokafka's protocol classes.

Neither Python client ships this request; the monitor needs it for bytes/s (partition
sizes on disk). aiokafka negotiates the version per connection: a broker without the API
raises ``IncompatibleBrokerVersion``, which is how support is detected.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeAlias

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Int16, Int32, Int64, Schema, String

from assignor.types import partitions_by_topic

_RESULTS = Array(
    ("error_code", Int16),
    ("log_dir", String("utf-8")),
    (
        "topics",
        Array(
            ("name", String("utf-8")),
            (
                "partitions",
                Array(
                    ("partition_index", Int32),
                    ("partition_size", Int64),
                    ("offset_lag", Int64),
                    ("is_future_key", Boolean),
                ),
            ),
        ),
    ),
)
_TOPICS = Array(("topic", String("utf-8")), ("partitions", Array(Int32)))


# Class names follow Kafka's and aiokafka's <Name>_v<version> convention.
class DescribeLogDirsResponse_v0(Response):
    API_KEY = 35
    API_VERSION = 0
    SCHEMA = Schema(("throttle_time_ms", Int32), ("results", _RESULTS))


class DescribeLogDirsResponse_v1(Response):
    API_KEY = 35
    API_VERSION = 1
    SCHEMA = DescribeLogDirsResponse_v0.SCHEMA


class DescribeLogDirsRequest_v0(RequestStruct):
    API_KEY = 35
    API_VERSION = 0
    RESPONSE_TYPE = DescribeLogDirsResponse_v0
    SCHEMA = Schema(("topics", _TOPICS))


class DescribeLogDirsRequest_v1(RequestStruct):
    API_KEY = 35
    API_VERSION = 1
    RESPONSE_TYPE = DescribeLogDirsResponse_v1
    SCHEMA = DescribeLogDirsRequest_v0.SCHEMA


DescribeLogDirsRequestStruct: TypeAlias = DescribeLogDirsRequest_v0 | DescribeLogDirsRequest_v1


class DescribeLogDirsRequest(Request[DescribeLogDirsRequestStruct]):
    """Sizes of the given partitions in every log dir of the broker it is sent to."""

    API_KEY = 35

    def __init__(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._topics = partitions_by_topic(partitions)

    def build(
        self, request_struct_class: type[DescribeLogDirsRequestStruct]
    ) -> DescribeLogDirsRequestStruct:
        return request_struct_class(self._topics)


def partition_sizes(response: Any) -> dict[tuple[str, int], int]:
    """(topic, partition) -> bytes on disk, from one broker's response (current replicas
    only; a log dir with an error contributes nothing)."""
    sizes: dict[tuple[str, int], int] = {}
    for error_code, _log_dir, topics in response.results:
        if error_code:
            continue
        for name, partitions in topics:
            for index, size, _lag, is_future in partitions:
                if not is_future:
                    sizes[(name, index)] = max(sizes.get((name, index), 0), size)
    return sizes
