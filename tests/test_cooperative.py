"""Cooperative rebalancing on the ``kafka`` fixture: only moving partitions stop.

Every member logs its ownership changes (monotonic time, generation); the checks read those
logs: no partition is owned by two members at once, retained partitions are never revoked,
nothing is re-delivered, the group converges within two rounds.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pytest
from prometheus_client import REGISTRY

from assignor.cooperative import COOPERATIVE, EAGER
from assignor.types import TopicPartition
from consumer_sdk.consumer import OwnershipEvent
from consumer_sdk.sink import CallbackSink
from local_kafka.clusters import ClusterKind, KafkaCluster
from tests.kafka_helpers import produce_tracked
from tests.sdk_helpers import SeenRecords, ThreadedMember, group_stable, member_config, wait_until

PARTITIONS = 12


class Group:
    """Threaded members of one group, their sink, and the load produced meanwhile."""

    def __init__(self, kafka: str, topic: str, handover: str = "one-round") -> None:
        self.kafka, self.topic, self.handover = kafka, topic, handover
        self.group = f"g-{topic}"
        self.seen = SeenRecords()
        self.members: dict[str, ThreadedMember] = {}
        self.departed: list[ThreadedMember] = []
        self.produced: set[tuple[int, int]] = set()

    def add(self, identity: str, protocol: str = COOPERATIVE) -> ThreadedMember:
        config = member_config(
            self.kafka,
            self.group,
            [self.topic],
            identity,
            rebalance_protocol=protocol,
            replan_after_secs=0,
            handover=self.handover,
        )
        member = ThreadedMember(config, CallbackSink(self.seen.write)).start()
        self.members[identity] = member
        return member

    def remove(self, identity: str) -> None:
        member = self.members.pop(identity)
        member.stop()
        self.departed.append(member)

    def stable(self) -> bool:
        """Every partition owned once and every member owning some (12 partitions >
        members: a member with none has not received its share yet)."""
        members = list(self.members.values())

        def settled() -> bool:
            busy = all(m.consumer is not None and m.consumer.assigned for m in members)
            return busy and group_stable(members, PARTITIONS)

        return wait_until(settled, 60)

    def owners(self) -> dict[TopicPartition, str]:
        return {
            tp: name
            for name, m in self.members.items()
            if m.consumer is not None
            for tp in m.consumer.assigned
        }

    def generation(self) -> int:
        return max(m.consumer.state.generation for m in self.members.values() if m.consumer)

    def logs(self) -> dict[str, list[OwnershipEvent]]:
        everyone = [*self.members.values(), *self.departed]
        return {
            m.config.member_identity + f"#{i}": list(m.consumer.ownership_log)
            for i, m in enumerate(everyone)
            if m.consumer is not None
        }

    @contextmanager
    def load(self, records: int) -> Iterator[None]:
        """Produce ``records`` paced over a few seconds while the body runs."""

        def produce() -> None:
            self.produced |= produce_tracked(
                self.kafka, self.topic, records, PARTITIONS, pause_every=60, pause_s=0.1
            )

        producer = threading.Thread(target=produce)
        producer.start()
        try:
            yield
        finally:
            producer.join(120)

    def all_delivered(self) -> bool:
        wanted = {(self.topic, p, o) for p, o in self.produced}
        return wait_until(lambda: wanted <= set(self.seen.counts), 60)

    def redelivered_unmoved(self) -> list[TopicPartition]:
        """Partitions read twice in places although they never changed owner. (Moved ones
        may be: the embedded broker refuses the old owner's last commit when another member
        already rejoins; a real broker accepts it. docs/architecture.md section 7.)"""
        spans = ownership_intervals(self.logs())
        moved = {tp for tp, owned in spans.items() if len({m for _, _, m in owned}) > 1}
        duplicated = {TopicPartition(t, p) for (t, p, _), n in self.seen.counts.items() if n > 1}
        return sorted(duplicated - moved)

    def stop(self) -> None:
        for name in list(self.members):
            self.remove(name)


@contextmanager
def running_group(
    kafka: str, topic_factory: Callable[..., str], handover: str = "one-round"
) -> Iterator[Group]:
    topic = topic_factory(PARTITIONS, prefix=f"coop-{uuid.uuid4().hex[:4]}")
    group = Group(kafka, topic, handover)
    try:
        yield group
    finally:
        group.stop()


def ownership_intervals(
    logs: dict[str, list[OwnershipEvent]],
) -> dict[TopicPartition, list[tuple[float, float, str]]]:
    """Per partition: (from, to, member) while the member owned it."""
    end = max((e.at for events in logs.values() for e in events), default=0.0) + 1.0
    intervals: dict[TopicPartition, list[tuple[float, float, str]]] = {}
    for member, events in logs.items():
        since: dict[TopicPartition, float] = {}
        for event in events:
            for tp in event.partitions:
                if event.kind == "assigned":
                    assert tp not in since, f"{member} got {tp} twice without a revoke"
                    since[tp] = event.at
                else:
                    assert tp in since, f"{member} revoked {tp} it did not own"
                    intervals.setdefault(tp, []).append((since.pop(tp), event.at, member))
        for tp, start in since.items():
            intervals.setdefault(tp, []).append((start, end, member))
    return intervals


def assert_never_two_owners(logs: dict[str, list[OwnershipEvent]]) -> None:
    for tp, spans in ownership_intervals(logs).items():
        spans.sort()
        for (_, first_end, first), (second_start, _, second) in itertools.pairwise(spans):
            assert first_end <= second_start, f"{tp} owned by {first} and {second} at once"


def assert_delivered_and_disjoint(group: Group, kind: ClusterKind) -> None:
    """Everything produced reached a sink, partitions that never moved were read once,
    and no partition ever had two owners. On a real broker, moved partitions were not read
    twice either: it accepts the old owner's hand-over commit during the rejoin, which the
    embedded broker refuses (docs/architecture.md section 7)."""
    assert group.all_delivered()
    assert group.redelivered_unmoved() == []  # retained partitions kept their positions
    assert_never_two_owners(group.logs())
    if kind is not ClusterKind.EMBEDDED:
        again = sorted({(t, p) for (t, p, _), n in group.seen.counts.items() if n > 1})
        spans = ownership_intervals(group.logs())
        assert group.seen.duplicates() == 0, [
            (tp, sorted(spans[TopicPartition(*tp)])) for tp in again
        ]


@contextmanager
def three_members(
    kafka: str, topic_factory: Callable[..., str], handover: str = "one-round"
) -> Iterator[Group]:
    with running_group(kafka, topic_factory, handover) as group:
        for i in range(3):
            group.add(f"sink-{i}")
        assert group.stable()
        yield group


def revoked_count(events: Sequence[OwnershipEvent], after: float) -> int:
    return sum(len(e.partitions) for e in events if e.kind == "revoked" and e.at > after)


def moved(before: dict[TopicPartition, str], after: dict[TopicPartition, str]) -> int:
    return sum(before.get(tp) != owner for tp, owner in after.items())


@pytest.mark.parametrize("handover", ["one-round", "two-round"])
def test_scale_out_and_in_stop_only_the_partitions_that_move(
    kafka_cluster_handle: KafkaCluster,
    topic_factory: Callable[..., str],
    handover: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kafka = kafka_cluster_handle.bootstrap_servers
    with (
        caplog.at_level(logging.INFO, logger="consumer_sdk.consumer"),
        caplog.at_level(logging.INFO, logger="consumer_sdk.kafka_client.cooperative"),
        three_members(kafka, topic_factory, handover) as group,
    ):
        with group.load(3000):
            for step in ("out", "in"):
                _scale(group, step)
        assert_delivered_and_disjoint(group, kafka_cluster_handle.kind)
    # Each revocation is counted and its partitions named (the benchmarks' Rscore reads them).
    messages = [r.getMessage() for r in caplog.records]
    counts = [int(m[1]) for text in messages if (m := re.search(r"revoked (\d+), added", text))]
    named = [m[1].split() for text in messages if (m := re.search(r"revoked: (.+)$", text))]
    assert sum(counts) > 0 and sum(map(len, named)) == sum(counts)
    assert all(item.rpartition(":")[0] == group.topic for items in named for item in items)
    releases = [m for r in caplog.records if (m := RELEASE_LINE.match(r.getMessage()))]
    if handover == "one-round":
        # Each old owner says how long its release took and which step took it.
        assert releases and all(int(m["partitions"]) > 0 for m in releases)
        assert all(
            int(m["total"]) >= max(int(m[s]) for s in ("lock", "writes", "commits", "release"))
            for m in releases
        )
    else:
        assert releases == []


RELEASE_LINE = re.compile(
    r"released (?P<partitions>\d+) partition\(s\) in generation \d+ after (?P<total>\d+) ms: "
    r"the lock (?P<lock>\d+), writes in flight (?P<writes>\d+), commits in flight "
    r"(?P<commits>\d+), the release commit (?P<release>\d+)$"
)


def _scale(group: Group, step: str) -> None:
    """Add (out) or remove (in) sink-3; check what moved and how fast the group settled."""
    before, generation = group.owners(), group.generation()
    mark = max(e.at for events in group.logs().values() for e in events)
    if step == "out":
        group.add("sink-3")
    else:
        group.remove("sink-3")
    assert group.stable()
    assert wait_until(lambda: group.generation() > generation, 30)
    after = group.owners()
    revoked = sum(
        revoked_count(m.consumer.ownership_log, mark)
        for name, m in group.members.items()
        if name != "sink-3" and m.consumer is not None
    )
    # Survivors revoke only what moved; with eager they would revoke everything.
    assert 0 < moved(before, after) < PARTITIONS
    assert revoked <= moved(before, after)
    # Converged within two rounds: the join and the hand-over (withholding), or the join
    # and the leave (one round: the leaving member's LeaveGroup starts the second).
    assert group.generation() - generation <= 2

    def handed(outcome: str) -> float:
        labels = {"group": group.group, "outcome": outcome}
        return REGISTRY.get_sample_value("autoscaler_consumer_handovers_total", labels) or 0.0

    if group.handover == "one-round":
        # What moved was given at once and read from its old owner's release mark (counted
        # when the new owner sees it, which a stable assignment does not wait for).
        assert wait_until(lambda: handed("released") > 0, 30)
        assert handed("timed_out") == 0
    else:
        assert [handed(o) for o in ("released", "unmarked", "timed_out")] == [0, 0, 0]
    if step == "in":
        # The leaving member read its partitions until the round that moved them, then left.
        departed = group.departed[-1].consumer
        assert departed is not None and departed.leave_outcome == "handed_over"


def test_rolling_restart_delivers_everything_with_disjoint_owners(
    kafka_cluster_handle: KafkaCluster, topic_factory: Callable[..., str]
) -> None:
    with three_members(kafka_cluster_handle.bootstrap_servers, topic_factory) as group:
        with group.load(2400):
            for i in range(3):
                group.remove(f"sink-{i}")
                group.add(f"sink-{i}")
                assert group.stable()
        assert_delivered_and_disjoint(group, kafka_cluster_handle.kind)


def test_an_eager_member_turns_the_group_eager_safely_and_back(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    with running_group(kafka, topic_factory) as group:
        group.add("sink-0")
        group.add("sink-1")
        assert group.stable()
        with group.load(2400):
            group.add("old-0", protocol=EAGER)  # an older SDK: eager, no cooperative support
            assert group.stable()

            def modes() -> set[str]:
                return {m.consumer.state.group_mode for m in group.members.values() if m.consumer}

            assert wait_until(lambda: modes() == {EAGER}, 30)
            group.remove("old-0")
            assert group.stable()
            assert wait_until(lambda: modes() == {COOPERATIVE}, 30)
        assert group.all_delivered()
        assert_never_two_owners(group.logs())
