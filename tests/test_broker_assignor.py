"""The broker-side assignor (KIP-848): confluent-kafka consumers with
``group.protocol=consumer`` and ``group.remote.assignor=autoscaler``, and no code of ours,
get the partitions of the plan published on their group's plans topic, on Apache Kafka."""

from __future__ import annotations

import random
import re
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from confluent_kafka import Producer

import assignor.broker as broker
from assignor import TopicPartition
from assignor.registry import get_heuristic
from benchmarks.support.kip848_members import Kip848Members, kafka_topic_id
from contract.broker_plans import (
    PLANS_TOPIC,
    PlanError,
    check_topic_id,
    encode_plan,
    plans_topic_for,
)
from local_kafka.apache_kafka import ApacheKafka, java_executable
from tests.sdk_helpers import wait_until

JAVA = Path(broker.__file__).parent / "java" / "kafkaautoscaler" / "broker"
SETTLE_S = 60.0
Plan = Mapping[str, Sequence[TopicPartition]]  # member key -> its partitions


@pytest.fixture
def cluster(apache_with_assignor: ApacheKafka) -> ApacheKafka:
    return apache_with_assignor


def new_group(cluster: ApacheKafka, prefix: str, partitions: int) -> tuple[str, str]:
    """A fresh topic of ``partitions`` and the name of a group of its own, whose plans topic
    is made (as its sidecar makes it)."""
    topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions, 1)
    group = f"g-{topic}"
    cluster.create_topic(plans_topic_for(group), 1, 1)
    return topic, group


def topic_id(cluster: ApacheKafka, topic: str) -> str:
    return kafka_topic_id(cluster.bootstrap_servers, topic)


def kip848_members(cluster: ApacheKafka, group: str, topic: str) -> Kip848Members:
    return Kip848Members(cluster.bootstrap_servers, group, topic, assignor=broker.ASSIGNOR_NAME)


def publish(cluster: ApacheKafka, group: str, records: Sequence[tuple[bytes, bytes]]) -> None:
    """Writes ``records`` to ``group``'s plans topic."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for key, value in records:
        producer.produce(plans_topic_for(group), value=value, key=key)
    assert producer.flush(30) == 0


def took(cluster: ApacheKafka, group: str, written_ms: int) -> bool:
    return f"took the plan of group {group} written at {written_ms} ms" in cluster.node_log(1)


def publish_plan(cluster: ApacheKafka, group: str, plan: Plan, topic: str) -> None:
    """Publishes ``plan`` and waits until the broker's assignor has read it."""
    written_ms = int(time.time() * 1000)
    ids = {topic: topic_id(cluster, topic)}
    assignment = {tp: member for member, owned in plan.items() for tp in owned}
    publish(
        cluster, group, [encode_plan(group, assignment, list(plan), ids, written_ms=written_ms)]
    )
    assert wait_until(lambda: took(cluster, group, written_ms), timeout_s=SETTLE_S)


def by_partition(plan: Plan) -> dict[str, set[int]]:
    return {member: {tp.partition for tp in owned} for member, owned in plan.items()}


def members_on_plan(cluster: ApacheKafka, group: str, topic: str, plan: Plan) -> Kip848Members:
    """Publishes ``plan``, starts the members it names, and waits until they hold it."""
    publish_plan(cluster, group, plan, topic)
    members = kip848_members(cluster, group, topic)
    try:
        for name in plan:
            members.join(name)
        assert wait_until(lambda: members.holds(by_partition(plan)), timeout_s=SETTLE_S), (
            members.owned
        )
    except BaseException:
        members.close()
        raise
    return members


# Uneven speeds: the speed-aware packing gives the members unequal partition counts, which no
# count-balancing assignor would.
SPEEDS = (60.0, 35.0, 30.0, 25.0, 20.0, 15.0, 10.0, 5.0, 5.0, 5.0, 5.0, 5.0)
CAPACITY = 100.0


def test_kip848_consumers_get_the_sidecars_packing(cluster: ApacheKafka) -> None:
    topic, group = new_group(cluster, "orders", len(SPEEDS))
    names = [f"{group}-{i}" for i in range(3)]
    speeds = {TopicPartition(topic, p): s for p, s in enumerate(SPEEDS)}
    packed = get_heuristic("repair").assign(speeds, capacity=CAPACITY, members=names)
    plan = {name: sorted(tp for tp, owner in packed.items() if owner == name) for name in names}
    assert sorted(len(owned) for owned in plan.values()) != [4, 4, 4]  # not an even spread
    members = members_on_plan(cluster, group, topic, plan)
    try:
        for owned in members.owned.values():
            assert sum(SPEEDS[p] for p in owned) <= CAPACITY
    finally:
        members.close()


def assignor_counts(cluster: ApacheKafka) -> dict[str, int]:
    """The assignor's JMX counts in the node's JVM (attached to: no JMX port needed)."""
    pid = cluster.node_pid(1)
    assert pid is not None
    reader = Path(__file__).parent / "java" / "MBeanAttributes.java"
    pattern = "kafkaautoscaler.broker:type=AutoscalerAssignor,*"
    printed = subprocess.run(
        [java_executable(), str(reader), str(pid), pattern],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    counts: dict[str, int] = {}
    for line in printed.stdout.splitlines():
        attribute, _, value = line.rpartition(" ")[2].partition("=")
        counts[attribute] = counts.get(attribute, 0) + int(value)
    return counts


def test_the_counts_are_on_jmx(cluster: ApacheKafka) -> None:
    before = assignor_counts(cluster)
    assert set(before) == {
        "RecordsRead",
        "RecordsRefused",
        "PlansFollowed",
        "Fallbacks",
        "Failures",
        "GroupsWithPlans",
    }
    topic, group = new_group(cluster, "jmx", 2)
    plan = {f"{group}-0": [TopicPartition(topic, 0), TopicPartition(topic, 1)]}
    members_on_plan(cluster, group, topic, plan).close()
    after = assignor_counts(cluster)
    assert after["RecordsRead"] > before["RecordsRead"]
    assert after["PlansFollowed"] > before["PlansFollowed"]
    assert after["GroupsWithPlans"] > before["GroupsWithPlans"]
    assert after["Failures"] == before["Failures"]


def test_without_a_plan_the_spread_is_even_and_sticky(cluster: ApacheKafka) -> None:
    topic, group = new_group(cluster, "plain", 9)
    members = kip848_members(cluster, group, topic)

    def spread() -> list[int]:
        return sorted(len(owned) for owned in members.owned.values())

    try:
        for i in range(3):
            members.join(f"{group}-{i}")
        assert wait_until(lambda: spread() == [3, 3, 3], timeout_s=SETTLE_S), members.owned
        before = {name: set(owned) for name, owned in members.owned.items()}
        members.join(f"{group}-3")
        assert wait_until(lambda: spread() == [2, 2, 2, 3], timeout_s=SETTLE_S), members.owned
        for name, owned in before.items():
            assert members.owned[name] <= owned  # kept, never swapped
    finally:
        members.close()


def test_bad_plan_records_are_refused_counted_and_the_next_plan_is_followed(
    cluster: ApacheKafka,
) -> None:
    topic, group = new_group(cluster, "bad", 4)
    names = [f"{group}-0", f"{group}-1"]
    ids = {topic: topic_id(cluster, topic)}
    now_ms = int(time.time() * 1000)
    one = {TopicPartition(topic, 0): names[0]}
    _, future = encode_plan(group, one, names, ids, written_ms=now_ms + 3_600_000)
    _, stale = encode_plan(group, one, names, ids, written_ms=now_ms - 86_400_000)
    key = group.encode()
    bad = [
        (key, b"\x00\xffnot json"),
        (key, b"[1, 2]"),
        (key, b'{"format": 2}'),
        (key, future),
        (key, stale),
        (b"another-group", future.replace(b"written_ms", b"x")),
        (
            key,
            b'{"format":1,"group":"%s","written_ms":%d,"members":{"m":{"nope":[0]}}}'
            % (group.encode(), now_ms),
        ),
        (key, b"[" * 100_000),
    ]
    # Seeded mutations of a valid plan: flipped bytes, cuts and repeats (the reader's parser
    # is fed bytes from the network).
    _, valid = encode_plan(group, one, names, ids, written_ms=now_ms)
    chance = random.Random(20261203)
    for _ in range(300):
        mutated = bytearray(valid)
        for _ in range(chance.randint(1, 4)):
            at = chance.randrange(len(mutated))
            kind = chance.randrange(3)
            if kind == 0:
                mutated[at] = chance.randrange(256)
            elif kind == 1:
                del mutated[at:]
                mutated.extend(b"x")
            else:
                mutated[at:at] = mutated[at : at + chance.randint(1, 40)]
        bad.append((key, bytes(mutated)))
    publish(cluster, group, bad)
    plan = {
        names[0]: [TopicPartition(topic, p) for p in (0, 1, 2)],
        names[1]: [TopicPartition(topic, 3)],
    }
    members_on_plan(cluster, group, topic, plan).close()
    log = cluster.node_log(1)
    plans_topic = re.escape(plans_topic_for(group))
    assert "unreadable" not in log  # every refusal had a reason the parser names
    for reason in (
        "value is not JSON",
        "value is not a JSON object",
        "format is not 1",
        r"written_ms is more than \d+ ms in the future",
        r"older than autoscaler.plans.max.age.ms \(\d+\)",
        "a topic id is not a Kafka topic id",
    ):
        assert (
            len(re.findall(rf"ignored the plan record at {plans_topic}-0@\d+: {reason}", log)) == 1
        )


def test_a_plan_in_another_groups_topic_is_refused_and_never_followed(
    cluster: ApacheKafka,
) -> None:
    """Whoever may write one group's plans topic cannot steer another group: a plan naming
    the victim group (its members, its topic) written to the writer's own plans topic is
    refused, the victim's members keep the even spread, and a hostile group id is never
    printed (no forged log line)."""
    topic, victim = new_group(cluster, "victim", 4)
    _, writer = new_group(cluster, "writer", 1)
    names = [f"{victim}-0", f"{victim}-1"]
    ids = {topic: topic_id(cluster, topic)}
    everything = {TopicPartition(topic, p): names[0] for p in range(4)}
    written_ms = int(time.time() * 1000)
    hostile = f"g-{uuid.uuid4().hex[:6]}\n2026-12-07 FAKE broker line\x1b[31m"
    forged = [
        encode_plan(victim, everything, names, ids, written_ms=written_ms),
        encode_plan(hostile, everything, names, ids, written_ms=written_ms),
    ]
    publish(cluster, writer, forged)
    refusal = (
        rf"ignored the plan record at {re.escape(plans_topic_for(writer))}-0@\d+: "
        r"it names another group"
    )
    assert wait_until(
        lambda: re.search(refusal, cluster.node_log(1)) is not None, timeout_s=SETTLE_S
    )
    members = kip848_members(cluster, victim, topic)
    try:
        for name in names:
            members.join(name)
        even = {names[0]: 2, names[1]: 2}
        assert wait_until(
            lambda: {n: len(members.owned.get(n, ())) for n in names} == even,
            timeout_s=SETTLE_S,
        ), members.owned
    finally:
        members.close()
    log = cluster.node_log(1)
    assert f"took the plan of group {victim} written at {written_ms}" not in log
    assert "FAKE broker line" not in log


def test_a_control_member_joining_makes_the_broker_apply_a_new_plan(cluster: ApacheKafka) -> None:
    topic, group = new_group(cluster, "drift", 6)
    names = [f"{group}-0", f"{group}-1"]
    first = {
        names[0]: [TopicPartition(topic, p) for p in range(5)],
        names[1]: [TopicPartition(topic, 5)],
    }
    second = {
        names[0]: [TopicPartition(topic, 0)],
        names[1]: [TopicPartition(topic, p) for p in range(1, 6)],
    }
    members = members_on_plan(cluster, group, topic, first)
    try:
        publish_plan(cluster, group, second, topic)  # speeds drifted; no member changed
        control = f"{broker.CONTROL_INSTANCE_PREFIX}-{group}"
        members.join(control)
        expected = {**by_partition(second), control: set()}
        assert wait_until(lambda: members.holds(expected), timeout_s=SETTLE_S), members.owned
        members.leave(control)
        assert members.holds(by_partition(second))
    finally:
        members.close()


def test_scale_out_waits_for_the_planned_member_and_nobody_moves_before(
    cluster: ApacheKafka,
) -> None:
    topic, group = new_group(cluster, "out", 6)
    a, b, c = (f"{group}-{i}" for i in range(3))
    tps = [TopicPartition(topic, p) for p in range(6)]
    members = members_on_plan(cluster, group, topic, {a: tps[:5], b: tps[5:]})
    try:
        publish_plan(cluster, group, {a: tps[:2], b: tps[5:], c: tps[2:5]}, topic)
        control = f"{broker.CONTROL_INSTANCE_PREFIX}-{group}"
        members.join(control)  # an assign() before c joins: the plan waits for c
        assert wait_until(
            lambda: "2 members and 1 control, no plan" in cluster.node_log(1), timeout_s=SETTLE_S
        )
        assert members.holds({a: set(range(5)), b: {5}, control: set()})
        members.leave(control)
        members.join(c)
        expected = {a: {0, 1}, b: {5}, c: {2, 3, 4}}
        assert wait_until(lambda: members.holds(expected), timeout_s=SETTLE_S), members.owned
    finally:
        members.close()


def test_scale_in_empties_the_member_before_it_stops(cluster: ApacheKafka) -> None:
    topic, group = new_group(cluster, "in", 6)
    a, b, c = (f"{group}-{i}" for i in range(3))
    tps = [TopicPartition(topic, p) for p in range(6)]
    members = members_on_plan(cluster, group, topic, {a: tps[:2], b: tps[2:4], c: tps[4:]})
    try:
        emptied = {a: tps[:3], b: tps[3:], c: []}
        publish_plan(cluster, group, emptied, topic)
        control = f"{broker.CONTROL_INSTANCE_PREFIX}-{group}"
        members.join(control)
        expected = {**by_partition(emptied), control: set()}
        assert wait_until(lambda: members.holds(expected), timeout_s=SETTLE_S), members.owned
        members.leave(control)
        members.leave(c)  # it owns nothing: its leaving pauses no partition
        survivors = {a: {0, 1, 2}, b: {3, 4, 5}}
        assert wait_until(lambda: members.holds(survivors), timeout_s=SETTLE_S), members.owned
    finally:
        members.close()


def test_the_java_side_names_what_the_python_side_names() -> None:
    source = (JAVA / "AutoscalerAssignor.java").read_text()
    shared = (JAVA / "SourceSettings.java").read_text()  # read by both broker assignors
    for text, constant, value in (
        (source, "NAME", broker.ASSIGNOR_NAME),
        (shared, "BOOTSTRAP_CONFIG", broker.BOOTSTRAP_PROPERTY),
        (source, "TOPIC_CONFIG", broker.TOPIC_PROPERTY),
        (shared, "MAX_AGE_CONFIG", broker.MAX_AGE_PROPERTY),
        (shared, "CLIENT_PREFIX", broker.CLIENT_PROPERTY_PREFIX),
        (source, "DEFAULT_TOPIC", PLANS_TOPIC),
        (source, "CONTROL_PREFIX", broker.CONTROL_INSTANCE_PREFIX),
    ):
        assert f'String {constant} = "{value}";' in text
    assert broker.ASSIGNOR_CLASS == "kafkaautoscaler.broker.AutoscalerAssignor"
    assert "package kafkaautoscaler.broker;" in source


@pytest.mark.parametrize(
    ("group", "assignment", "members", "why"),
    [
        ("", {}, ["m"], "group"),
        ("g", {}, [], "members"),
        ("g", {}, [""], "member key"),
        ("g", {}, ["m" * 256], "member key"),
        ("g", {TopicPartition("t", 0): "other"}, ["m"], "not a member"),
        ("g", {TopicPartition("unknown", 0): "m"}, ["m"], "no topic id"),
    ],
)
def test_a_plan_the_broker_would_refuse_is_not_encoded(
    group: str, assignment: dict[TopicPartition, str], members: list[str], why: str
) -> None:
    with pytest.raises(PlanError, match=why):
        encode_plan(group, assignment, members, {"t": "AAAAAAAAAAAAAAAAAAAAAA"}, written_ms=0)


@pytest.mark.parametrize("bad", ["", "short", "A" * 23, "AAAAAAAAAAAAAAAAAAAA==", "!" * 22])
def test_a_malformed_topic_id_is_refused(bad: str) -> None:
    with pytest.raises(PlanError, match="22 characters of base64"):
        check_topic_id(bad)


def test_topic_ids_are_written_in_kafkas_url_safe_alphabet() -> None:
    assert check_topic_id("lUxO2+QJTCaD6fNrrg9/Jw") == "lUxO2-QJTCaD6fNrrg9_Jw"
