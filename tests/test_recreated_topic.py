"""A jump back while reading (consumer_sdk.pipeline.recreated), with a fake client: the same
topic id reads on; a new one writes what was read of the earlier topic first, then reads the
new topic from its start and looks its partitions up again; no id learnt, nothing to check.
The consumer on a real broker: tests/test_spark_sink.py."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence

from aiokafka.structs import TopicPartition as KTP

from consumer_sdk.pipeline.recreated import TopicIdentityWatch
from consumer_sdk.pipeline.retry import RetryPolicy

P0, P1, OTHER = KTP("t", 0), KTP("t", 1), KTP("u", 0)


class Client:
    """The client calls the watch makes, recorded in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.paused: set[KTP] = set()

    def assignment(self) -> set[KTP]:
        return {P0, P1, OTHER}

    def pause(self, *partitions: KTP) -> None:
        self.paused |= set(partitions)
        self.calls.append(("pause", sorted(partitions)))

    def resume(self, *partitions: KTP) -> None:
        self.paused -= set(partitions)
        self.calls.append(("resume", sorted(partitions)))

    def seek(self, partition: KTP, offset: int) -> None:
        self.calls.append(("seek", (partition, offset)))

    async def committed(self, partition: KTP) -> int | None:
        return None

    async def seek_to_beginning(self, *partitions: KTP) -> None:
        self.calls.append(("beginning", sorted(partitions)))

    async def seek_to_end(self, *partitions: KTP) -> None:
        self.calls.append(("end", sorted(partitions)))


class Pipeline:
    """The stages the watch waits for and hands partitions to."""

    def __init__(self, client: Client, ids: list[dict[str, str] | Exception]) -> None:
        self.client = client
        self.ids = ids
        self.held: set[KTP] = set()
        self.read_from: list[KTP] = []
        self.read_again: list[set[KTP]] = []

    async def fetch_ids(self, _client: object, topics: Sequence[str]) -> dict[str, str]:
        answer = self.ids.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return {t: i for t, i in answer.items() if t in topics}

    def holds(self, partitions: Collection[KTP]) -> bool:
        return bool(self.held & set(partitions))

    async def wait_for_writes(self, partitions: set[KTP]) -> None:
        self.client.calls.append(("writes drained", sorted(partitions)))

    def watch(self, *, from_earliest: bool = True) -> TopicIdentityWatch:
        return TopicIdentityWatch(
            group="g",
            client=lambda: self.client,
            fetch_ids=self.fetch_ids,
            holds=self.holds,
            wait_for_writes=self.wait_for_writes,
            read_again=lambda _client, partitions: self.read_again.append(set(partitions)),
            read_from=self.read_from.extend,
            waiting=frozenset,
            from_earliest=from_earliest,
            retry=RetryPolicy(first_delay_s=0.001, max_delay_s=0.001),
        )


def test_a_jump_back_of_the_same_topic_reads_on_from_where_it_went() -> None:
    async def go() -> tuple[bool, list[tuple[str, object]], list[KTP]]:
        client = Client()
        pipeline = Pipeline(client, [{"t": "A"}, RuntimeError("broker away"), {"t": "A"}])
        watch = pipeline.watch()
        await watch.topic_ids(["t"])
        taken = watch.rewound(P0, 7)
        await watch.idle()
        return taken, client.calls, pipeline.read_from

    taken, calls, read_from = asyncio.run(go())
    # Not taken; paused where the records start, asked again after a failure, resumed.
    assert not taken
    assert calls == [("pause", [P0]), ("seek", (P0, 7)), ("resume", [P0])]
    assert read_from == [P0]


def test_a_new_topic_id_writes_the_earlier_topic_first_then_reads_the_new_one_again() -> None:
    async def go() -> tuple[list[tuple[str, object]], list[set[KTP]], dict[str, str]]:
        client = Client()
        pipeline = Pipeline(client, [{"t": "A", "u": "U"}, {"t": "B"}])
        pipeline.held = {P1}  # records of the earlier topic still in the buffer
        watch = pipeline.watch()
        await watch.topic_ids(["t", "u"])
        assert not watch.rewound(P0, 0)
        await asyncio.sleep(0.2)
        assert pipeline.read_again == []  # still waiting for the buffer
        pipeline.held = set()
        await watch.idle()
        return client.calls, pipeline.read_again, watch.known

    calls, read_again, known = asyncio.run(go())
    assert calls == [
        ("pause", [P0]),
        ("seek", (P0, 0)),
        ("pause", [P0, P1]),  # every partition of the topic, none of another
        ("writes drained", [P0, P1]),
        ("beginning", [P0, P1]),
    ]
    assert read_again == [{P0, P1}]  # looked up again: the sink learns the new id there
    assert known == {"t": "A", "u": "U"}  # learnt anew by that lookup, not by the check


def test_a_new_topic_read_from_its_end_where_auto_offset_reset_is_latest() -> None:
    async def go() -> list[tuple[str, object]]:
        client = Client()
        watch = Pipeline(client, [{"t": "A"}, {"t": "B"}]).watch(from_earliest=False)
        await watch.topic_ids(["t"])
        watch.rewound(P1, 3)
        await watch.idle()
        return client.calls

    assert ("end", [P0, P1]) in asyncio.run(go())


def test_without_a_learnt_id_a_jump_back_is_taken_as_it_is() -> None:
    async def go() -> tuple[bool, list[tuple[str, object]]]:
        client = Client()
        watch = Pipeline(client, [{}]).watch()
        await watch.topic_ids(["t"])  # brokers before Kafka 3.1: no ids
        return watch.rewound(P0, 0), client.calls

    assert asyncio.run(go()) == (True, [])
