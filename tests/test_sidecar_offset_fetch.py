"""OffsetFetch answers read strictly (sidecar.offset_fetch): pure, on aiokafka's codec."""

from __future__ import annotations

from io import BytesIO
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.protocol.commit import OffsetFetchResponse_v1, OffsetFetchResponse_v3
from hypothesis import given
from hypothesis import strategies as st

from assignor import TopicPartition
from sidecar.offset_fetch import OffsetFetchFailed, committed_offsets

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def over_the_wire(response: Any) -> Any:
    return type(response).decode(BytesIO(response.encode()))


def test_offsets_and_capacity_reports_of_the_partitions_that_have_them() -> None:
    response = OffsetFetchResponse_v3(
        0,
        [("a", [(0, 42, '{"capacity": 1000}', 0), (1, -1, "", 0)]), ("b", [(0, 7, "", 0)])],
        0,
    )
    committed = committed_offsets(over_the_wire(response), [A0, A1, B0])
    assert committed.offsets == {A0: 42, B0: 7}  # a-1: nothing committed, not an error
    assert committed.metadata == {A0: '{"capacity": 1000}'}


def test_a_v1_answer_has_no_group_level_error_to_read() -> None:
    response = OffsetFetchResponse_v1([("a", [(0, 5, "", 0)])])
    assert committed_offsets(over_the_wire(response), [A0]).offsets == {A0: 5}


@pytest.mark.parametrize(
    "response, reason",
    [
        # A coordinator loading the group's offsets after a restart: no partitions at all.
        (
            OffsetFetchResponse_v3(0, [], 14),
            "the group's coordinator answered COORDINATOR_LOAD_IN_PROGRESS (14)",
        ),
        (
            OffsetFetchResponse_v3(0, [], 16),
            "the group's coordinator answered NOT_COORDINATOR (16)",
        ),
        (
            OffsetFetchResponse_v3(0, [("a", [(0, 3, "", 0), (1, -1, "", 3)])], 0),
            "a-1: UNKNOWN_TOPIC_OR_PARTITION (3)",
        ),
        (
            OffsetFetchResponse_v3(0, [("a", [(0, 3, "", 0)])], 0),
            "the answer left out 2 partition(s) asked for, a-1 first",
        ),
    ],
)
def test_an_answer_that_does_not_say_every_offset_is_refused(response: Any, reason: str) -> None:
    with pytest.raises(OffsetFetchFailed) as refused:
        committed_offsets(over_the_wire(response), [A0, A1, B0])
    assert str(refused.value) == reason


def test_an_answer_shaped_otherwise_is_refused_in_one_line() -> None:
    odd = SimpleNamespace(error_code=0, topics=[("a", [(0, "many", "", 0)])])
    with pytest.raises(OffsetFetchFailed, match="shaped otherwise"):
        committed_offsets(odd, [A0])


partition_rows = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.integers(-1, 2**40),
        st.text(max_size=8),
        st.sampled_from([0, 0, 0, 3, 14, 16]),
    ),
    max_size=4,
)


@given(
    topics=st.lists(st.tuples(st.sampled_from("ab"), partition_rows), max_size=3),
    group_error=st.sampled_from([0, 0, 14, 15, 16]),
    asked=st.sets(st.sampled_from([A0, A1, B0])),
)
def test_any_answer_gives_offsets_for_every_asked_partition_or_a_reason(
    topics: list[tuple[str, list[tuple[int, int, str, int]]]],
    group_error: int,
    asked: set[TopicPartition],
) -> None:
    response = OffsetFetchResponse_v3(0, topics, group_error)
    try:
        committed = committed_offsets(over_the_wire(response), asked)
    except OffsetFetchFailed as refused:
        assert str(refused) and "\n" not in str(refused)
        return
    assert group_error == 0
    answered = {TopicPartition(t, p) for t, rows in topics for p, *_ in rows}
    assert asked <= answered
    assert all(offset >= 0 for offset in committed.offsets.values())
    assert set(committed.metadata) <= set(committed.offsets)
