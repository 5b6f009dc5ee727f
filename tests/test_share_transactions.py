"""A share group (KIP-932) reading what a transactional producer wrote, every third
transaction aborted, on Apache Kafka: only committed records reach the sink."""

from __future__ import annotations

import asyncio
import threading
import uuid

from benchmarks.support.history import check, produce_transactions
from benchmarks.support.share_members import read_from_the_start
from consumer_sdk.share import ShareMember
from consumer_sdk.share.isolation import current_isolation, default_admin
from consumer_sdk.sink import CallbackSink
from local_kafka.apache_kafka import ApacheKafka
from tests.sdk_helpers import SeenRecords, member_config, wait_until
from tests.test_transactions import PARTITIONS, landed


def test_share_members_read_only_committed_transactions(
    apache_with_assignor: ApacheKafka,
) -> None:
    """A share group reads uncommitted records unless its share.isolation.level says
    otherwise (a group setting): the member sets it to its isolation_level before it joins."""
    bootstrap = apache_with_assignor.bootstrap_servers
    topic = f"txn-share-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    apache_with_assignor.create_topic(topic, PARTITIONS, 1)
    read_from_the_start(bootstrap, group)
    history = produce_transactions(bootstrap, topic, PARTITIONS, transactions=12, records_each=50)
    seen = SeenRecords()
    config = member_config(bootstrap, group, [topic], "share-0", group_type="share")
    member = ShareMember(config, CallbackSink(seen.write))
    thread = threading.Thread(target=lambda: asyncio.run(member.run_async()), daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: len(seen.counts) >= len(history.committed), timeout_s=120)
    finally:
        member.request_stop()
        thread.join(60)
    verdict = check(history, landed(seen))
    assert not verdict.aborted_landed and not verdict.missing, str(verdict)
    assert current_isolation(default_admin(config), group) == "read_committed"
