"""The assignor's shared vocabulary: partitions grouped by topic as Kafka's requests list them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from assignor.types import TopicPartition, partitions_by_topic

partitions = st.lists(
    st.tuples(st.sampled_from(["a", "b", "orders"]), st.integers(0, 50)), unique=True
)


@given(partitions)
def test_every_partition_once_under_its_topic_in_order(
    given_partitions: list[tuple[str, int]],
) -> None:
    grouped = partitions_by_topic(given_partitions)
    topics = [topic for topic, _ in grouped]
    assert topics == sorted(set(topics))
    assert all(ps == sorted(ps) and ps for _, ps in grouped)
    flat = [(topic, p) for topic, ps in grouped for p in ps]
    assert sorted(flat) == sorted(given_partitions)


def test_named_tuples_group_like_plain_pairs() -> None:
    named = [TopicPartition("b", 1), TopicPartition("a", 2), TopicPartition("b", 0)]
    assert partitions_by_topic(named) == [("a", [2]), ("b", [0, 1])]
