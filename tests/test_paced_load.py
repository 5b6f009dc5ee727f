"""The steady load tests and benchmarks share (local_kafka.paced_load), on every cluster."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from local_kafka.paced_load import PacedLoad
from tests.sdk_helpers import wait_until

PARTITIONS = 4


def test_records_go_round_robin_and_every_one_sent_is_acknowledged(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(PARTITIONS)
    with PacedLoad(kafka, topic, 400, PARTITIONS, value_bytes=10) as load:
        assert wait_until(lambda: load.sent >= 3 * PARTITIONS * 10)
    # Stopping flushes: whatever was sent is acknowledged, each at its own offset.
    assert len(load.acked) == load.sent
    per_partition = Counter(partition for partition, _ in load.acked)
    assert set(per_partition) == set(range(PARTITIONS))
    assert max(per_partition.values()) - min(per_partition.values()) <= 1
    for partition, count in per_partition.items():
        assert {o for p, o in load.acked if p == partition} == set(range(count))


@pytest.mark.parametrize(
    ("rate", "partitions", "value_bytes"), [(0, 1, 1), (-5, 1, 1), (10, 0, 1), (10, 1, -1)]
)
def test_a_load_that_cannot_run_is_refused_naming_its_fields(
    rate: float, partitions: int, value_bytes: int
) -> None:
    with pytest.raises(ValueError, match="rate must be > 0, partitions >= 1 and value_bytes"):
        PacedLoad("127.0.0.1:9", "t", rate, partitions, value_bytes=value_bytes)
