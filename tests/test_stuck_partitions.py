"""Fetches failing at one offset again and again: counted per partition, reported stuck
after three in a row, and the partition paused between tries (never skipped)."""

from __future__ import annotations

from aiokafka.structs import TopicPartition as KTP

from consumer_sdk.pipeline.stuck import StuckPartitions
from consumer_sdk.records.corrupt_fetches import STUCK_AFTER, CorruptFetches, pause_for

P0, P1 = KTP("t", 0), KTP("t", 1)


class Client:
    def __init__(self) -> None:
        self.paused: set[KTP] = set()
        self.calls: list[tuple[str, KTP]] = []

    def pause(self, *partitions: KTP) -> None:
        self.paused |= set(partitions)
        self.calls += [("pause", tp) for tp in partitions]

    def resume(self, *partitions: KTP) -> None:
        self.paused -= set(partitions)
        self.calls += [("resume", tp) for tp in partitions]


def test_a_partition_is_stuck_after_failures_in_a_row_at_one_offset_only() -> None:
    fetches = CorruptFetches()
    for _ in range(STUCK_AFTER - 1):
        fetches.failed("t", 0, 40, "bad")
    fetches.failed("t", 0, 41, "bad")  # another offset: the wire, starts over
    assert fetches.stuck() == {}
    for _ in range(STUCK_AFTER - 1):
        fetches.failed("t", 0, 41, "bad")
    assert fetches.stuck()[("t", 0)].count == STUCK_AFTER
    fetches.read("t", 0, 41)  # read up to the bad offset only: still stuck
    assert ("t", 0) in fetches.stuck()
    fetches.read("t", 0, 45)  # read past it: over
    assert fetches.stuck() == {}


def test_pauses_grow_and_are_bounded() -> None:
    fetches = CorruptFetches()
    pauses = [pause_for(fetches.failed("t", 0, 7, "bad")) for _ in range(STUCK_AFTER + 12)]
    assert pauses[STUCK_AFTER - 1] == 1.0 and pauses[STUCK_AFTER] == 2.0
    assert pauses == sorted(pauses) and pauses[-1] == 60.0


def test_a_stuck_partition_is_paused_tried_again_when_due_and_said_until_read() -> None:
    now = [0.0]
    fetches = CorruptFetches()
    step = StuckPartitions(clock=lambda: now[0])
    client = Client()
    for _ in range(STUCK_AFTER):
        failure = fetches.failed("t", 0, 9, "t:0: the record batch after offset 8 fails its CRC")
    stuck = {P0: failure}
    line = step.step(client, stuck, owned={P0, P1})
    assert client.paused == {P0} and line is not None and "after offset 8" in line
    assert step.step(client, stuck, owned={P0, P1}) is not None and client.paused == {P0}
    now[0] = 1.0  # its pause is over: fetched again
    step.step(client, stuck, owned={P0, P1})
    assert client.paused == set()
    # Not failed again yet: not paused again.
    step.step(client, stuck, owned={P0, P1})
    assert client.paused == set()
    failure = fetches.failed("t", 0, 9, "again")  # the try failed
    step.step(client, {P0: failure}, owned={P0, P1})
    assert client.paused == {P0}
    # Read past it (a clean copy): resumed, no longer said.
    assert step.step(client, {}, owned={P0, P1}) is None and client.paused == set()


def test_partitions_not_owned_or_being_looked_up_are_left_alone() -> None:
    fetches = CorruptFetches()
    for _ in range(STUCK_AFTER):
        failure = fetches.failed("t", 0, 9, "bad")
    client = Client()
    step = StuckPartitions(clock=lambda: 0.0)
    assert step.step(client, {P0: failure}, owned={P1}) is None
    step.step(client, {P0: failure}, owned={P0}, busy={P0})
    assert client.calls == []
