"""The client's fetch sizes: whole producer batches per partition, about one batch ahead."""

from __future__ import annotations

import pytest

from consumer_sdk.records.fetch_sizes import (
    FETCH_AHEAD_BATCHES,
    MIN_FETCH_BYTES,
    PARTITION_FETCH_BYTES,
    RESPONSE_COPIES,
    fetch_ahead_bytes,
    fetch_ahead_room,
    fetch_max_bytes,
    fetch_room,
)

MIB = 1024 * 1024


def test_a_response_is_the_fetch_ahead_budget_and_at_least_1_mib() -> None:
    assert fetch_max_bytes(16 * MIB) == fetch_ahead_bytes(16 * MIB)
    assert fetch_max_bytes(4096) == fetch_ahead_bytes(4096) == MIB


def test_a_partition_is_asked_for_a_whole_batch_of_a_default_topic() -> None:
    default_max_message_bytes = 1048588  # Kafka's, a record batch's upper size by default
    assert default_max_message_bytes - 12 <= PARTITION_FETCH_BYTES


def test_the_budget_is_the_fetch_ahead_in_batches() -> None:
    assert fetch_ahead_bytes(64 * MIB) == int(64 * MIB * FETCH_AHEAD_BATCHES) > MIB


@pytest.mark.parametrize(
    ("held", "expected"),
    [
        (0, 16 * MIB),  # nothing held: a whole response
        (4 * MIB, 12 * MIB),  # what is left of the budget
        (16 * MIB - 1, MIN_FETCH_BYTES),  # floored: a fetch of a few bytes is a wasted trip
        (16 * MIB, None),  # spent: no fetch
        (20 * MIB, None),
    ],
)
def test_the_next_response_gets_what_is_left_of_the_budget(held: int, expected: int | None) -> None:
    assert fetch_room(16 * MIB, held, 16 * MIB) == expected


def test_a_response_is_never_asked_for_more_than_the_client_allows() -> None:
    assert fetch_room(64 * MIB, 0, 16 * MIB) == 16 * MIB


@pytest.mark.parametrize(
    ("pending", "free_slots", "expected"),
    [
        (0, 0, 4 * MIB),  # an empty batch: the whole fetch ahead (a quarter batch)
        # Every slot taken: a response is held three times while decoded and may bring a
        # whole producer batch (1 MiB) more than asked, so a third of the room less 3 MiB.
        (10 * MIB, 0, MIB),
        (12 * MIB, 0, MIB // 3),
        (13 * MIB, 0, 0),  # no room for a producer batch more: wait for a write to end
        (16 * MIB, 0, 0),  # full, waiting for a write slot: nothing more is fetched
        (17 * MIB, 0, 0),  # a batch overshoots by the last response's records
        # A free slot: the sink holds a batch less than it may, so the whole fetch ahead.
        (16 * MIB, 1, 4 * MIB),
        (26 * MIB, 1, MIB),
    ],
)
def test_the_fetch_ahead_keeps_the_consumer_within_its_batches(
    pending: int, free_slots: int, expected: int
) -> None:
    assert fetch_ahead_room(16 * MIB, pending, free_slots) == expected
    # What the consumer may hold: the batch being built and the free slots' batches; what
    # it fetches, with a whole producer batch past it, three times.
    if expected:
        held = pending + RESPONSE_COPIES * (expected + PARTITION_FETCH_BYTES)
        assert held <= (1 + free_slots) * 16 * MIB


def test_small_batches_go_on_reading_when_a_producer_batch_is_larger_than_the_room() -> None:
    # A 1 MiB batch has no room for a whole producer batch three times: with every slot
    # taken nothing is fetched until a write ends; with one free, a third of the room.
    assert fetch_ahead_room(MIB, 0, free_slots=0) == 0
    assert fetch_ahead_room(MIB, 0, free_slots=1) == 2 * MIB // 3
    assert fetch_ahead_room(MIB, MIB // 2, free_slots=1) == MIB // 2


def test_the_whole_fetch_ahead_can_be_kept_for_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("consumer_sdk.records.fetch_sizes.FETCH_WITHIN_BATCH", False)
    assert fetch_ahead_room(16 * MIB, 16 * MIB) == fetch_ahead_bytes(16 * MIB)
