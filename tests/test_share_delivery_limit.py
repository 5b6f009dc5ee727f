"""A share-group member stopping while its sink fails, on Apache Kafka: records below the
group's delivery limit are released for another member, and records at their last delivery
(released, Kafka would archive them) are written on until the sink takes them."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from typing import Any

import pytest
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from benchmarks.support.share_members import read_from_the_start
from consumer_sdk.share import ShareMember
from consumer_sdk.share.delivery import GROUP_SETTING
from local_kafka.apache_kafka import ApacheKafka
from tests.kafka_helpers import produce_tracked
from tests.sdk_helpers import member_config, wait_until
from tests.test_share_member import RecordingSink

LIMIT = 2  # the least the broker allows (group.share.min.delivery.count.limit)


class CountingClient:
    """A ShareConsumer that notes each record's delivery count as it is polled."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.client = ShareConsumer(settings)
        self.deliveries: dict[tuple[int, int], int] = {}

    def poll(self, timeout: float) -> list[Any]:
        messages: list[Any] = list(self.client.poll(timeout))
        for message in messages:
            if message.error() is None:
                where = (int(message.partition()), int(message.offset()))
                self.deliveries[where] = int(message.delivery_count())
        return messages

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def run_member(member: ShareMember, timeout_s: float = 120) -> None:
    thread = threading.Thread(target=lambda: asyncio.run(member.run_async()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        member.request_stop()
        thread.join(30)
        pytest.fail("the member did not get records and stop")


def test_a_stopping_member_releases_what_may_come_again_and_writes_its_last_deliveries(
    apache_with_assignor: ApacheKafka, caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap = apache_with_assignor.bootstrap_servers
    topic = f"share-limit-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    apache_with_assignor.create_topic(topic, 1, 1)
    read_from_the_start(bootstrap, group)
    entry = ConfigEntry(GROUP_SETTING, str(LIMIT), incremental_operation=AlterConfigOpType.SET)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    produced = produce_tracked(bootstrap, topic, 20, 1)

    def member_with(sink: RecordingSink, clients: list[CountingClient]) -> ShareMember:
        config = member_config(bootstrap, group, [topic], "share-0", group_type="share")

        def client(settings: dict[str, Any]) -> CountingClient:
            clients.append(CountingClient(settings))
            return clients[-1]

        return ShareMember(config, sink, client_factory=client)

    # The first member's sink is down: it stops and releases its records (first delivery).
    first_clients: list[CountingClient] = []
    down = RecordingSink(failures=10**6, on_failure=lambda: first.request_stop())
    first = member_with(down, first_clients)
    run_member(first)
    released = set(first_clients[0].deliveries)
    assert released and set(first_clients[0].deliveries.values()) == {1}
    assert first.delivery_limit == LIMIT and down.written == []

    # The second takes them again, at their last delivery; its sink fails twice, the first
    # failure asks it to stop: it writes them on instead of releasing them to be archived.
    second_clients: list[CountingClient] = []
    flaky = RecordingSink(failures=2, on_failure=lambda: second.request_stop())
    second = member_with(flaky, second_clients)
    with caplog.at_level(logging.WARNING, logger="consumer_sdk.share.member"):
        run_member(second)
    deliveries = second_clients[0].deliveries
    last = {where for where, count in deliveries.items() if count >= LIMIT}
    assert released <= last, "the released records came again, at the limit"
    written = {key for _, keys in flaky.written for key in keys}
    assert written == last and second.records_given_up == 0
    assert f"at their last delivery ({GROUP_SETTING} {LIMIT})" in caplog.text

    # Nothing is lost: the records written were accepted, the others come to the next member.
    rest = RecordingSink()
    third_clients: list[CountingClient] = []
    third = member_with(rest, third_clients)
    thread = threading.Thread(target=lambda: asyncio.run(third.run_async()), daemon=True)
    thread.start()
    try:
        owed = produced - written

        def seen() -> set[tuple[int, int]]:
            return {key for _, keys in rest.written for key in keys}

        assert wait_until(lambda: seen() >= owed, timeout_s=120), (
            f"records never came again: {sorted(owed - seen())[:10]}"
        )
        assert not seen() & written, "an accepted record came again"
    finally:
        third.request_stop()
        thread.join(60)
