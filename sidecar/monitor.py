"""The monitor: end offsets (ListOffsets) and the group's committed offsets (OffsetFetch)
of every partition of the group's topics, turned into speeds and lags. For a share group
(KIP-932), the share-partition start offsets and lags (DescribeShareGroupOffsets) instead of
committed offsets, and ShareGroupDescribe instead of DescribeGroups.

One :meth:`Monitor.poll` per ``--interval``. Whatever cannot be read this round (a broker
down, a topic deleted, a leader moving) is reported in :attr:`Reading.problems` and the
monitor keeps going with what it has.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import IncompatibleBrokerVersion, KafkaError
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from assignor import TopicPartition
from assignor.backlog import DrainRule
from assignor.plugin import partition_racks
from assignor.types import partitions_by_topic
from contract.kafka_client import requests as kafka_requests
from contract.kafka_client.log_dirs import DescribeLogDirsRequest, partition_sizes
from contract.kafka_client.metadata import topic_partitions
from contract.kafka_client.share_requests import (
    DescribeShareGroupOffsetsRequest,
    ShareGroupDescribeRequest,
    ShareResponseError,
    share_group_description,
    share_offsets,
)
from contract.settings import READ_COMMITTED
from contract.snapshot import UNITS, PartitionStat, Snapshot
from sidecar.offset_fetch import OffsetFetchFailed, committed_offsets
from sidecar.open_transactions import HeldOpen, OpenTransactions, held_open_line
from sidecar.speed import SpeedTracker

log = logging.getLogger(__name__)

# A problem that lasts is logged again this often (seconds).
PROBLEM_REPEAT_S = 60.0


@dataclass
class Reading:
    """One round of measurements."""

    at: float
    end_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    sizes: dict[TopicPartition, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # The group's state as its coordinator says ("Stable", "PreparingRebalance", ...) and its
    # members' ids; None when the description was not available.
    group_state: str | None = None
    member_ids: frozenset[str] | None = None
    # The assignment protocol the group's members chose ("autoscaler": our consumers, which
    # report their capacity with each commit); None when not described.
    group_protocol: str | None = None
    # The metadata of each partition's committed offset (the consumers' capacity reports).
    commit_metadata: dict[TopicPartition, str] = field(default_factory=dict)
    # False when the end or committed offsets could not be read this round: the lags are
    # not known (a failed committed read is not "nothing committed", the whole log).
    lags_known: bool = True
    # The racks each partition is local to (Monitor(rack_locality=...)); None: not asked.
    partition_racks: dict[TopicPartition, frozenset[str]] | None = None
    # A share group's lag per partition (the broker's, else end minus the share-partition
    # start offset, else 0: not read yet, a share group starts at the end); None: not a
    # share group. ``committed`` then holds the start offsets.
    share_lags: dict[TopicPartition, float] | None = None
    # Topic name -> id, where the round learnt them (share groups).
    topic_ids: dict[str, str] = field(default_factory=dict)
    # read_committed: each partition's last stable offset (what its consumers can reach),
    # and the partitions held by a transaction left open (sidecar.open_transactions).
    stable_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    open_transactions: dict[TopicPartition, HeldOpen] = field(default_factory=dict)

    @property
    def group_members(self) -> int | None:
        """How many members the group has; None when unknown."""
        return None if self.member_ids is None else len(self.member_ids)

    @property
    def group_stable(self) -> bool | None:
        """Whether the group is not rebalancing; None when its state is unknown."""
        return None if self.group_state is None else self.group_state == "Stable"

    def lags(self) -> dict[TopicPartition, float]:
        """What the group's consumers can read and have not committed: the last stable
        offset where read (read_committed), else the end offset, minus the committed offset
        (the whole log if nothing was committed); a share group's lags as measured."""
        if self.share_lags is not None:
            return dict(self.share_lags)
        return {
            tp: float(max(0, self.stable_offsets.get(tp, end) - self.committed.get(tp, 0)))
            for tp, end in self.end_offsets.items()
        }


class GroupDescription(NamedTuple):
    """What the coordinator says of a group (None each: not described)."""

    state: str | None
    member_ids: frozenset[str] | None
    protocol: str | None


NOT_DESCRIBED = GroupDescription(None, None, None)


def group_description(groups: Sequence[Any], group: str) -> GroupDescription:
    """State, member ids and protocol of ``group`` in a DescribeGroups response's ``groups``
    (tuples of error code, group id, state, protocol type, protocol, members, ...; a
    member's id first); ``NOT_DESCRIBED`` when it is missing, answered with an error, or
    shaped otherwise."""
    for entry in groups:
        try:
            error, group_id, state, protocol, members = (
                entry[0],
                entry[1],
                entry[2],
                entry[4],
                entry[5],
            )
            ids = frozenset(str(member[0]) for member in members)
        except (TypeError, IndexError, KeyError):
            continue
        if group_id == group and error == 0 and isinstance(state, str):
            return GroupDescription(state, ids, protocol if isinstance(protocol, str) else None)
    return NOT_DESCRIBED


def lags_in_bytes(
    lags: Mapping[TopicPartition, float],
    byte_speeds: Mapping[TopicPartition, float],
    record_speeds: Mapping[TopicPartition, float],
    sizes: Mapping[TopicPartition, int],
    end_offsets: Mapping[TopicPartition, int],
) -> dict[TopicPartition, float]:
    """Lags in records as bytes of log, the quantity of speeds in bytes/s: each partition's
    lag times its bytes per record, over the speed window (bytes/s over records/s), else
    its log's bytes over its end offset, else the mean of the partitions that have one."""
    per_record: dict[TopicPartition, float] = {}
    for tp in lags:
        written, read = byte_speeds.get(tp, 0.0), record_speeds.get(tp, 0.0)
        if written > 0 and read > 0:
            per_record[tp] = written / read
        elif sizes.get(tp, 0) > 0 and end_offsets.get(tp, 0) > 0:
            per_record[tp] = sizes[tp] / end_offsets[tp]
    mean = sum(per_record.values()) / len(per_record) if per_record else 0.0
    return {tp: lag * per_record.get(tp, mean) for tp, lag in lags.items()}


class Monitor:
    """Reads offsets of ``topics`` for ``group``; keeps speed windows."""

    def __init__(
        self,
        bootstrap_servers: str,
        group: str,
        topics: Sequence[str],
        *,
        window_s: float = 30.0,
        min_span_s: float = 3.0,
        unit: str = "records/s",
        request_timeout_ms: int = 10_000,
        client_options: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rack_locality: str = "none",
        group_type: str = "consumer",
        describe_group: bool = True,
        isolation_level: str = READ_COMMITTED,
    ) -> None:
        if not topics:
            raise ValueError("topics must name at least one topic")
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
        self.requested_unit = unit
        self.rack_locality = rack_locality  # none, leader or replicas (SidecarConfig's)
        self.group_type = group_type  # consumer or share (SidecarConfig's)
        # read_committed: lags are measured to the last stable offset (a share group's
        # isolation is its own group setting, and its lags the broker's).
        self.reads_committed = isolation_level == READ_COMMITTED and group_type != "share"
        self.open_transactions = OpenTransactions()
        # False for a KIP-848 group: the classic DescribeGroups finds it "Dead", and the
        # sidecar's planner describes it with ConsumerGroupDescribe instead.
        self.describe_group = describe_group
        # Why this cluster cannot serve a share group (None: it can, or not known yet).
        self.share_unsupported: str | None = None
        self._said: dict[str, float] = {}  # problem -> when it was last logged
        self.log_dirs_supported: bool | None = None  # unknown until asked
        self.groups_describable: bool | None = None  # DescribeGroups; unknown until asked
        self.size_tracker = SpeedTracker(window_s, min_span_s)
        self.group = group
        self.topics = tuple(topics)
        self.tracker = SpeedTracker(window_s, min_span_s)
        self.clock = clock
        self.sequence = 0
        self._bootstrap = bootstrap_servers
        # A round must not hang for aiokafka's default 40 s when a broker is down.
        self._request_timeout_ms = request_timeout_ms
        self.use_options(client_options or {})
        self._consumer: AIOKafkaConsumer | None = None
        # Asks ListOffsets for the last stable offsets (isolation read_committed).
        self._stable_reader: AIOKafkaConsumer | None = None
        self._admin: AIOKafkaAdminClient | None = None

    def use_options(self, client_options: dict[str, Any]) -> None:
        """The client options the next :meth:`start` connects with."""
        self._options = {"request_timeout_ms": self._request_timeout_ms, **client_options}

    async def start(self) -> None:
        """Connect (no group membership: the monitor only reads offsets)."""
        self._consumer = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, **self._options)
        await self._consumer.start()
        if self.reads_committed:
            self._stable_reader = AIOKafkaConsumer(
                bootstrap_servers=self._bootstrap, isolation_level=READ_COMMITTED, **self._options
            )
            await self._stable_reader.start()
        self._admin = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap, **self._options)
        await self._admin.start()

    async def stop(self) -> None:
        """Disconnect."""
        for client in (self._consumer, self._stable_reader):
            if client is not None:
                await client.stop()
        if self._admin is not None:
            await self._admin.close()
        self._consumer = self._stable_reader = self._admin = None

    async def poll(self) -> Reading:
        """Read end and committed offsets once and update the speed windows."""
        assert self._consumer is not None and self._admin is not None, "call start() first"
        reading = Reading(at=self.clock())
        partitions = await self._partitions(reading)
        if self.rack_locality != "none" and partitions:
            # The metadata the partitions were just read from: leaders, replicas, racks.
            reading.partition_racks = partition_racks(
                kafka_requests.cluster(self._consumer),
                self.topics,
                self.rack_locality == "replicas",
            )
        if partitions:
            try:
                ends = await self._consumer.end_offsets(partitions)
                reading.end_offsets = {
                    TopicPartition(tp.topic, tp.partition): int(o) for tp, o in ends.items()
                }
            except KafkaError as exc:
                reading.lags_known = False
                reading.problems.append(f"end offsets unavailable: {exc!r}")
            if self._stable_reader is not None:
                await self._stable(partitions, reading)
            if self.group_type != "share":
                await self._committed(partitions, reading)
        if self.group_type == "share":
            described = await self._share_round(partitions, reading)
        elif self.describe_group:
            described = await self._describe_group()
        else:
            described = NOT_DESCRIBED
        reading.group_state, reading.member_ids, reading.group_protocol = described
        self.tracker.observe(reading.at, reading.end_offsets)
        self.tracker.forget(TopicPartition(tp.topic, tp.partition) for tp in partitions)
        if self.requested_unit == "bytes/s" and partitions and self.log_dirs_supported is not False:
            sizes = await self._sizes(partitions, reading)
            self.size_tracker.observe(reading.at, sizes)
            self.size_tracker.forget(TopicPartition(tp.topic, tp.partition) for tp in partitions)
        self._log_problems(reading)
        return reading

    async def _stable(self, partitions: list[KafkaTopicPartition], reading: Reading) -> None:
        """The last stable offsets (ListOffsets, read_committed), and the partitions a
        transaction left open holds (reported in ``reading.problems``)."""
        assert self._stable_reader is not None
        try:
            stable = await self._stable_reader.end_offsets(partitions)
        except KafkaError as exc:
            reading.lags_known = False
            reading.problems.append(f"last stable offsets unavailable: {exc!r}")
            return
        reading.stable_offsets = {
            TopicPartition(tp.topic, tp.partition): int(o) for tp, o in stable.items()
        }
        held = self.open_transactions.observe(
            reading.at, reading.stable_offsets, reading.end_offsets
        )
        reading.open_transactions = held
        reading.problems.extend(held_open_line(tp, h) for tp, h in sorted(held.items()))

    def _log_problems(self, reading: Reading) -> None:
        """Each problem when it appears, and once a minute while it lasts (a cluster without
        share groups, a topic not found: every round says so, the log once)."""
        for problem in reading.problems:
            said = self._said.get(problem)
            if said is None or reading.at - said >= PROBLEM_REPEAT_S:
                log.warning("monitor: %s", problem)
                self._said[problem] = reading.at
        for gone in set(self._said) - set(reading.problems):
            del self._said[gone]

    async def _committed(self, partitions: list[KafkaTopicPartition], reading: Reading) -> None:
        """The group's committed offsets and their metadata (the capacity reports), asked of
        its coordinator and read strictly (:mod:`sidecar.offset_fetch`)."""
        assert self._admin is not None
        request = kafka_requests.offset_fetch_request(self.group, partitions_by_topic(partitions))
        try:
            coordinator = await self._admin.find_coordinator(self.group)
            response = await kafka_requests.send(self._admin, coordinator, request)
            committed = committed_offsets(
                response, (TopicPartition(tp.topic, tp.partition) for tp in partitions)
            )
        except KafkaError as exc:
            reading.lags_known = False
            reading.problems.append(f"committed offsets unavailable: {exc!r}")
            return
        except OffsetFetchFailed as exc:
            reading.lags_known = False
            reading.problems.append(f"committed offsets unavailable: {exc}")
            return
        reading.committed = committed.offsets
        reading.commit_metadata = committed.metadata

    async def _share_round(
        self, partitions: list[KafkaTopicPartition], reading: Reading
    ) -> GroupDescription:
        """A share group's offsets (when it has partitions) and description, both asked of its
        coordinator, looked up once a round."""
        assert self._admin is not None
        try:
            coordinator = await self._admin.find_coordinator(self.group)
        except KafkaError as exc:
            if partitions:
                reading.lags_known = False
                reading.problems.append(f"share-group offsets unavailable: {exc!r}")
            return NOT_DESCRIBED
        if partitions:
            await self._share_offsets(partitions, reading, coordinator)
        if self.share_unsupported:  # no ShareGroupDescribe either
            return NOT_DESCRIBED
        return await self._describe_share_group(coordinator)

    async def _share_offsets(
        self, partitions: list[KafkaTopicPartition], reading: Reading, coordinator: int
    ) -> None:
        """A share group's start offsets and lags, and the topics' ids (DescribeShareGroupOffsets
        at the group's coordinator)."""
        assert self._admin is not None
        request = DescribeShareGroupOffsetsRequest(
            self.group, ((tp.topic, tp.partition) for tp in partitions)
        )
        try:
            offsets = share_offsets(
                await kafka_requests.send(self._admin, coordinator, request), self.group
            )
        except IncompatibleBrokerVersion:
            self.share_unsupported = (
                "--group-type share: this cluster has no share groups (no "
                "DescribeShareGroupOffsets): they need Apache Kafka 4.1 or later"
            )
            reading.lags_known = False
            reading.problems.append(self.share_unsupported)
            return
        except (KafkaError, ShareResponseError) as exc:
            reading.lags_known = False
            reading.problems.append(f"share-group offsets unavailable: {exc!r}")
            return
        self.share_unsupported = None
        reading.committed = dict(offsets.start)
        reading.topic_ids = dict(offsets.topic_ids)
        lags: dict[TopicPartition, float] = {}
        for tp, end in reading.end_offsets.items():
            if tp in offsets.lag:
                lags[tp] = float(offsets.lag[tp])
            elif tp in offsets.start:
                lags[tp] = float(max(0, end - offsets.start[tp]))
            else:
                lags[tp] = 0.0  # not read yet: a share group starts at the log's end
        reading.share_lags = lags

    async def _describe_share_group(self, coordinator: int) -> GroupDescription:
        """A share group's state and member ids (ShareGroupDescribe); ``NOT_DESCRIBED`` when
        the coordinator does not answer."""
        assert self._admin is not None
        try:
            response = await kafka_requests.send(
                self._admin, coordinator, ShareGroupDescribeRequest([self.group])
            )
            described = share_group_description(response, self.group)
        except (KafkaError, ShareResponseError) as exc:
            log.debug("monitor: share group description unavailable: %r", exc)
            return NOT_DESCRIBED
        return GroupDescription(described.state, described.member_ids, described.assignor)

    async def _describe_group(self) -> GroupDescription:
        """The group's state, member ids and protocol; ``NOT_DESCRIBED`` when the coordinator
        does not answer or the broker cannot describe groups (the controller then does not
        wait)."""
        assert self._admin is not None
        if self.groups_describable is False:
            return NOT_DESCRIBED
        try:
            responses = await self._admin.describe_consumer_groups([self.group])
        except IncompatibleBrokerVersion:  # the embedded broker: not asked again
            self.groups_describable = False
            log.info(
                "monitor: this cluster cannot describe groups; scale-ups wait the settle time only"
            )
            return NOT_DESCRIBED
        except KafkaError as exc:
            log.debug("monitor: group description unavailable: %r", exc)
            return NOT_DESCRIBED
        self.groups_describable = True
        for response in responses:
            described = group_description(getattr(response, "groups", ()), self.group)
            if described != NOT_DESCRIBED:
                return described
        return NOT_DESCRIBED

    @property
    def unit(self) -> str:
        """The unit speeds are in: bytes/s when asked for and the cluster can tell sizes."""
        if self.requested_unit == "bytes/s" and self.log_dirs_supported is not False:
            return "bytes/s"
        return "records/s"

    def per_record(self) -> float | None:
        """What one record is in :attr:`unit`: 1 for records/s; for bytes/s, bytes of log a
        record over the speed window (None until both speeds are known)."""
        if self.unit != "bytes/s":
            return 1.0
        written = sum(self.size_tracker.speeds().values())
        records = sum(self.tracker.speeds().values())
        return written / records if written > 0 and records > 0 else None

    def speeds(self) -> dict[TopicPartition, float]:
        """Current speeds in :attr:`unit`: the window's, or during a step up the slopes
        since it began, see :meth:`sidecar.speed.SpeedTracker.following_speeds`."""
        tracker = self.size_tracker if self.unit == "bytes/s" else self.tracker
        return tracker.following_speeds()

    def lags(self, reading: Reading) -> dict[TopicPartition, float]:
        """``reading``'s lags in the quantity of :attr:`unit` (records, or bytes of log
        when speeds are bytes/s), so that a backlog and a speed add up."""
        lags = reading.lags()
        if self.unit != "bytes/s":
            return lags
        return lags_in_bytes(
            lags,
            self.size_tracker.speeds(),
            self.tracker.speeds(),
            reading.sizes,
            reading.end_offsets,
        )

    async def _sizes(
        self, partitions: list[KafkaTopicPartition], reading: Reading
    ) -> dict[TopicPartition, int]:
        """Bytes on disk per partition (largest current replica) from every broker."""
        assert self._consumer is not None
        request = DescribeLogDirsRequest((tp.topic, tp.partition) for tp in partitions)
        sizes: dict[TopicPartition, int] = {}
        for node_id in kafka_requests.broker_ids(self._consumer):
            try:
                response = await kafka_requests.send(self._consumer, node_id, request)
            except IncompatibleBrokerVersion:
                self.log_dirs_supported = False
                reading.problems.append(
                    "DescribeLogDirs is not supported by this cluster: speeds in records/s"
                )
                return {}
            except KafkaError as exc:
                reading.problems.append(f"log dirs of broker {node_id} unavailable: {exc!r}")
                continue
            for (topic, partition), size in partition_sizes(response).items():
                tp = TopicPartition(topic, partition)
                sizes[tp] = max(sizes.get(tp, 0), size)
        self.log_dirs_supported = True
        reading.sizes = sizes
        return sizes

    async def _partitions(self, reading: Reading) -> list[KafkaTopicPartition]:
        assert self._consumer is not None
        try:
            known = await topic_partitions(self._consumer, self.topics)
        except KafkaError as exc:
            reading.problems.append(f"metadata unavailable: {exc!r}")
            return [KafkaTopicPartition(tp.topic, tp.partition) for tp in self.tracker.windows]
        found: list[KafkaTopicPartition] = []
        for topic in self.topics:
            if topic not in known:
                reading.problems.append(f"topic {topic} not found")
                continue
            found.extend(KafkaTopicPartition(topic, p) for p in sorted(known[topic]))
        return found

    def snapshot(
        self,
        reading: Reading,
        wall_time: float | None = None,
        drain: DrainRule | None = None,
        speeds: Mapping[TopicPartition, float] | None = None,
        lags: Mapping[TopicPartition, float] | None = None,
        capacity: float | None = None,
    ) -> Snapshot:
        """The speed snapshot for the SDK's assignor (partitions with a speed only), with
        the rule the controller drains backlog by and, when it sizes with a measured one, the
        capacity; ``speeds`` and ``lags`` as :meth:`speeds` and :meth:`lags` returned them
        this round (computed again when not given)."""
        self.sequence += 1
        if lags is None:
            lags = self.lags(reading)
        stats = {
            tp: PartitionStat(speed, lags.get(tp, 0.0), reading.end_offsets.get(tp, 0))
            for tp, speed in (self.speeds() if speeds is None else speeds).items()
        }
        return Snapshot(
            self.group,
            self.sequence,
            time.time() if wall_time is None else wall_time,
            self.unit,
            stats,
            drain,
            capacity,
        )
