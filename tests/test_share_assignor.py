"""The share-group (KIP-932) assignor: its spread, checked alone on seeded random loads, and in
an Apache Kafka broker with confluent-kafka share consumers (no code of ours) reading a skewed
topic."""

from __future__ import annotations

import base64
import json
import math
import random
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

import assignor.broker as broker
from assignor import TopicPartition
from benchmarks.support.kip848_members import kafka_topic_id
from benchmarks.support.share_members import ShareMembers
from contract.broker_plans import PlanError
from contract.share_loads import SHARE_LOADS_TOPIC, encode_share_loads
from local_kafka.apache_kafka import ApacheKafka, java_executable, kafka_classpath
from local_kafka.broker_assignor import ensure_broker_assignor_jar
from local_kafka.clusters import ClusterKind
from tests.conftest import skip_unless_runnable
from tests.sdk_helpers import wait_until

JAVA = Path(broker.__file__).parent / "java" / "kafkaautoscaler" / "broker"
CHECK = Path(__file__).parent / "java" / "ShareSpreadCheck.java"
CHECK_CLASS = "kafkaautoscaler.broker.ShareSpreadCheck"
SETTLE_S = 60.0
Owned = dict[str, dict[str, list[int]]]  # member -> topic id -> partitions
Spread = Callable[[Sequence[Mapping[str, Any]]], list[Owned]]


@pytest.fixture(scope="module")
def spread(tmp_path_factory: pytest.TempPathFactory) -> Spread:
    """Runs the broker's ShareSpread on cases (see ShareSpreadCheck.java), one JVM per call."""
    skip_unless_runnable(ClusterKind.APACHE)
    jar, kafka = ensure_broker_assignor_jar(), kafka_classpath()
    classes = tmp_path_factory.mktemp("share-spread")
    javac = shutil.which("javac")
    assert javac is not None, "javac (a JDK 17) is needed to build the broker's assignor"
    subprocess.run(
        [javac, "--release", "17", "-nowarn", "-cp", f"{jar}:{kafka}", "-d", str(classes), CHECK],
        check=True,
        timeout=120,
    )

    def run(cases: Sequence[Mapping[str, Any]]) -> list[Owned]:
        done = subprocess.run(
            [java_executable(), "-cp", f"{classes}:{jar}:{kafka}", CHECK_CLASS],
            input="\n".join(json.dumps(case) for case in cases),
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        return [json.loads(line) for line in done.stdout.splitlines()]

    return run


def random_topic_id(chance: random.Random) -> str:
    return base64.urlsafe_b64encode(chance.randbytes(16)).decode().rstrip("=")


def a_case(
    members: Sequence[str],
    loads: Mapping[tuple[str, int], float],
    *,
    subscriptions: Mapping[str, Sequence[str]] | None = None,
    current: Owned | None = None,
) -> dict[str, Any]:
    topics = sorted({topic for topic, _ in loads})
    return {
        "members": list(members),
        "subscriptions": dict(subscriptions or {m: topics for m in members}),
        "partitions": [[t, p] for t, p in sorted(loads)],
        "loads": [[t, p, load] for (t, p), load in sorted(loads.items())],
        "current": current or {},
    }


def random_loads(chance: random.Random) -> dict[tuple[str, int], float]:
    """Skewed loads in consumers: some partitions above one consumer, most below."""
    loads: dict[tuple[str, int], float] = {}
    for _ in range(chance.randint(1, 3)):
        topic = random_topic_id(chance)
        for partition in range(chance.randint(1, 16)):
            hot = chance.random() < 0.4
            loads[topic, partition] = chance.uniform(0.5, 6) if hot else chance.uniform(0, 0.5)
    return loads


def readers(owned: Owned) -> dict[tuple[str, int], set[str]]:
    found: dict[tuple[str, int], set[str]] = {}
    for member, topics in owned.items():
        for topic, partitions in topics.items():
            for partition in partitions:
                found.setdefault((topic, partition), set()).add(member)
    return found


def member_loads(owned: Owned, loads: Mapping[tuple[str, int], float]) -> dict[str, float]:
    """Each member's load when every partition's readers take equal pieces of it."""
    by_partition = readers(owned)
    return {
        member: sum(
            loads[topic, p] / len(by_partition[topic, p])
            for topic, partitions in topics.items()
            for p in partitions
        )
        for member, topics in owned.items()
    }


def sized_cases(seed: int, count: int) -> list[dict[str, Any]]:
    """Cases with as many members as the sidecar would start: ceil(total load) + 1."""
    chance = random.Random(seed)
    cases = []
    for _ in range(count):
        loads = random_loads(chance)
        size = math.ceil(sum(loads.values())) + 1
        cases.append(a_case([f"m{i:03d}" for i in range(size)], loads))
    return cases


def case_loads(case: Mapping[str, Any]) -> dict[tuple[str, int], float]:
    return {(t, p): load for t, p, load in case["loads"]}


def test_sized_for_the_load_no_member_is_over_one_consumer(spread: Spread) -> None:
    cases = sized_cases(20261204, 200)
    for case, owned in zip(cases, spread(cases), strict=True):
        loads = case_loads(case)
        assert set(readers(owned)) == set(loads)  # every partition is read
        assert max(member_loads(owned, loads).values()) <= 1.0 + 1e-9
        for (topic, partition), reading in readers(owned).items():
            # A partition at k consumers needs k members at least.
            assert len(reading) >= math.ceil(loads[topic, partition] - 1e-9)


def test_the_skewed_load_of_the_issue_spreads_the_hot_partition(spread: Spread) -> None:
    topic = "AAAAAAAAAAAAAAAAAAAAAA"
    loads = {(topic, 0): 5.0, **{(topic, p): 0.2 for p in range(1, 12)}}
    size = math.ceil(sum(loads.values())) + 1
    [owned] = spread([a_case([f"m{i}" for i in range(size)], loads)])
    assert len(readers(owned)[topic, 0]) >= 5
    assert max(member_loads(owned, loads).values()) <= 1.0 + 1e-9
    # Kafka's simple assignor gives the hot partition one member of these nine.
    assert len(owned) == size < len(loads)


def test_members_read_only_topics_they_subscribe_to(spread: Spread) -> None:
    chance = random.Random(7)
    cases = []
    for _ in range(100):
        loads = random_loads(chance)
        topics = sorted({t for t, _ in loads})
        members = [f"m{i:02d}" for i in range(chance.randint(1, 12))]
        subscriptions = {m: chance.sample(topics, chance.randint(1, len(topics))) for m in members}
        cases.append(a_case(members, loads, subscriptions=subscriptions))
    for case, owned in zip(cases, spread(cases), strict=True):
        subscribed = {t for chosen in case["subscriptions"].values() for t in chosen}
        readable = {(t, p) for t, p in case_loads(case) if t in subscribed}
        assert set(readers(owned)) == readable
        for member, read in owned.items():
            assert set(read) <= set(case["subscriptions"][member])


def test_the_same_loads_and_members_keep_the_assignment(spread: Spread) -> None:
    cases = sized_cases(11, 100)
    first = spread(cases)
    again = spread([{**case, "current": owned} for case, owned in zip(cases, first, strict=True)])
    assert again == first


def test_partitions_without_a_load_count_as_the_mean(spread: Spread) -> None:
    topic = "BBBBBBBBBBBBBBBBBBBBBA"
    case = a_case([f"m{i}" for i in range(4)], {(topic, 0): 3.0, (topic, 1): 1.0})
    case["partitions"] = [[topic, p] for p in range(4)]  # 2 and 3 have no load: 2.0 each
    [owned] = spread([case])
    assert set(readers(owned)) == {(topic, p) for p in range(4)}
    [unknown] = spread([{**case, "loads": []}])  # nothing known: one member each
    assert all(len(reading) == 1 for reading in readers(unknown).values())


# --- in a broker, with share consumers -------------------------------------------------------


@pytest.fixture
def cluster(apache_with_assignor: ApacheKafka) -> ApacheKafka:
    return apache_with_assignor


def publish(cluster: ApacheKafka, records: Sequence[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for key, value in records:
        producer.produce(SHARE_LOADS_TOPIC, value=value, key=key)
    assert producer.flush(30) == 0


def took(cluster: ApacheKafka, group: str, written_ms: int) -> bool:
    return f"took the loads of group {group} written at {written_ms} ms" in cluster.node_log(1)


@pytest.fixture
def writing(cluster: ApacheKafka) -> Iterator[Callable[[str, int], None]]:
    """Starts writing to every partition of a topic, until the test ends."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(topic: str, partitions: int) -> None:
        def write() -> None:
            producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
            sent = 0
            while not stop.is_set():
                producer.produce(topic, value=b"x", partition=sent % partitions)
                sent += 1
                if sent % partitions == 0:
                    producer.poll(0)
                    time.sleep(0.005)
            producer.flush(10)

        thread = threading.Thread(target=write, daemon=True)
        threads.append(thread)
        thread.start()

    yield start
    stop.set()
    for thread in threads:
        thread.join(timeout=30)


def test_share_consumers_read_the_hot_partition_together(
    cluster: ApacheKafka, writing: Callable[[str, int], None]
) -> None:
    topic = f"hot-{uuid.uuid4().hex[:6]}"
    group = f"g-{topic}"
    cluster.create_topic(topic, 6, 1)
    written_ms = int(time.time() * 1000)
    loads = {TopicPartition(topic, 0): 4.0, **{TopicPartition(topic, p): 0.2 for p in range(1, 6)}}
    ids = {topic: kafka_topic_id(cluster.bootstrap_servers, topic)}
    publish(cluster, [encode_share_loads(group, loads, {topic: 6}, ids, written_ms=written_ms)])
    assert wait_until(lambda: took(cluster, group, written_ms), timeout_s=SETTLE_S)
    writing(topic, 6)
    members = ShareMembers(cluster.bootstrap_servers, group, topic)
    try:
        for i in range(6):
            members.join(f"{group}-{i}")
        # Total 5 consumers over 6 members: the hot partition needs 5 of them (Kafka's simple
        # assignor gives each partition one member here).
        assert wait_until(lambda: len(members.readers().get(0, ())) >= 5, timeout_s=SETTLE_S), (
            members.readers()
        )
        assert wait_until(lambda: set(members.readers()) == set(range(6)), timeout_s=SETTLE_S)
        assert members.errors == []
    finally:
        members.close()
    assert "6 members over 6 partitions by the loads of group " + group in cluster.node_log(1)


def test_without_loads_a_share_group_gets_kafkas_simple_assignment(
    cluster: ApacheKafka, writing: Callable[[str, int], None]
) -> None:
    topic = f"plain-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, 3, 1)
    writing(topic, 3)
    members = ShareMembers(cluster.bootstrap_servers, f"g-{topic}", topic)
    try:
        for i in range(2):
            members.join(f"plain-{i}")
        assert wait_until(lambda: set(members.readers()) == {0, 1, 2}, timeout_s=SETTLE_S)
    finally:
        members.close()
    assert "no fresh loads name a share group's topics" in cluster.node_log(1)


def test_bad_loads_records_are_refused_with_a_reason_and_the_next_is_taken(
    cluster: ApacheKafka,
) -> None:
    topic = f"bad-{uuid.uuid4().hex[:6]}"
    group = f"g-{topic}"
    cluster.create_topic(topic, 2, 1)
    ids = {topic: kafka_topic_id(cluster.bootstrap_servers, topic)}
    now_ms = int(time.time() * 1000)
    one = {TopicPartition(topic, 0): 1.5}
    _, future = encode_share_loads(group, one, {topic: 2}, ids, written_ms=now_ms + 3_600_000)
    _, valid = encode_share_loads(group, one, {topic: 2}, ids, written_ms=now_ms)
    key = group.encode()
    bad = [
        (key, b"\x00\xffnot json"),
        (key, b'{"format": 2}'),
        (key, future),
        (key, valid.replace(b"1.5", b"-1.5")),
        (key, valid.replace(b"1.5", b'"1.5"')),
        (key, valid.replace(ids[topic].encode(), b"nope")),
        (key, b"[" * 100_000),
    ]
    chance = random.Random(20261204)
    for _ in range(300):  # seeded mutations: the reader parses bytes from the network
        mutated = bytearray(valid)
        for _ in range(chance.randint(1, 4)):
            at = chance.randrange(len(mutated))
            mutated[at : at + 1] = bytes([chance.randrange(256)]) * chance.randint(0, 3)
        bad.append((key, bytes(mutated)))
    publish(cluster, bad)
    fresh_ms = int(time.time() * 1000)
    publish(cluster, [encode_share_loads(group, one, {topic: 2}, ids, written_ms=fresh_ms)])
    assert wait_until(lambda: took(cluster, group, fresh_ms), timeout_s=SETTLE_S)
    log = cluster.node_log(1)
    assert "unreadable" not in log  # every refusal had a reason the parser names
    for reason in (
        "value is not JSON",
        "format is not 1",
        r"written_ms is more than \d+ ms in the future",
        r"a load is not a number in \[0, 1000000\]",
        "a topic id is not a Kafka topic id",
    ):
        where = rf"ignored the loads record at {SHARE_LOADS_TOPIC}-0@\d+: {reason}"
        assert len(re.findall(where, log)) == 1, reason


# --- the contract ----------------------------------------------------------------------------


def test_the_java_side_names_what_the_python_side_names() -> None:
    source = (JAVA / "ShareAssignor.java").read_text()
    for constant, value in (
        ("NAME", broker.SHARE_ASSIGNOR_NAME),
        ("TOPIC_CONFIG", broker.SHARE_TOPIC_PROPERTY),
        ("DEFAULT_TOPIC", SHARE_LOADS_TOPIC),
    ):
        assert f'String {constant} = "{value}";' in source
    assert broker.SHARE_ASSIGNOR_CLASS == "kafkaautoscaler.broker.ShareAssignor"
    loads = (JAVA / "ShareLoads.java").read_text()
    assert "static final double MAX_LOAD = 1_000_000.0;" in loads


TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


@pytest.mark.parametrize(
    ("group", "loads", "partitions", "why"),
    [
        ("", {}, {"t": 1}, "group"),
        ("g", {}, {}, "at least one topic"),
        ("g", {}, {"t": 0}, "partitions"),
        ("g", {}, {"unknown": 1}, "no topic id"),
        ("g", {TopicPartition("t", 1): 1.0}, {"t": 1}, "not one the group reads"),
        ("g", {TopicPartition("t", 0): -1.0}, {"t": 1}, "load of t-0"),
        ("g", {TopicPartition("t", 0): math.nan}, {"t": 1}, "load of t-0"),
        ("g", {TopicPartition("t", 0): 2e6}, {"t": 1}, "load of t-0"),
    ],
)
def test_loads_the_broker_would_refuse_are_not_encoded(
    group: str, loads: dict[TopicPartition, float], partitions: dict[str, int], why: str
) -> None:
    ids = {"t": TOPIC_ID}
    with pytest.raises(PlanError, match=why):
        encode_share_loads(group, loads, partitions, ids, written_ms=1)


def test_loads_are_encoded_per_partition_with_zero_for_the_unmeasured() -> None:
    key, value = encode_share_loads(
        "g", {TopicPartition("t", 2): 0.5}, {"t": 3}, {"t": TOPIC_ID}, written_ms=7
    )
    assert key == b"g"
    assert json.loads(value) == {
        "format": 1,
        "group": "g",
        "written_ms": 7,
        "loads": {TOPIC_ID: [0.0, 0.0, 0.5]},
    }
