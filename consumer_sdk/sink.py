"""Where batches go: the :class:`Sink` protocol (one Arrow table per topic and batch), the
table's schema, and a sink that calls a user function with Records."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, Protocol, overload, runtime_checkable

import pyarrow as pa

from assignor import TopicPartition

# A record's headers: (key, value) pairs in the order the producer sent them.
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

# A record batch the decoder refuses (malformed, or too large once inflated) is handed over as
# one row at its last offset, with no key or value and this header, whose value says why and
# which offsets it held: the commit moves past it, and a sink puts it in its dead-letter table
# (SparkTableSink does; a CallbackSink function sees it as a Record with this header).
REFUSED_HEADER = "kafka-autoscaler.refused-batch"

# One partition's fetched records as the record path decodes them.
RECORD_SCHEMA = pa.schema(
    [
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),  # milliseconds since the epoch, as Kafka keeps it
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADERS),
    ]
)

# What a sink is given: a topic's records of one batch, its partitions' in offset order.
SINK_SCHEMA = RECORD_SCHEMA.append(pa.field("partition", pa.int32()))

# What ``batch_bytes`` counts is a batch as it sits in memory: each record's key, value and
# header bytes plus its fixed-width cells. Per record: offset and timestamp (8 + 8), the
# offsets into the key, value and header columns (3 x 4), a validity byte for key and value
# as the native decoder keeps them (2), and the partition the sink's table adds (4). Per
# header: its key and value offsets (2 x 4) and a validity byte.
RECORD_FIXED_BYTES = 8 + 8 + 3 * 4 + 2 + 4
HEADER_FIXED_BYTES = 2 * 4 + 1


class Record(NamedTuple):
    """One Kafka record as the sink sees it (a named tuple: built once per record on the hot
    path, about 3x cheaper than a frozen dataclass)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()  # a header value may be null

    @property
    def size(self) -> int:
        """Bytes the record takes in a batch's columns (what BATCH_BYTES counts): key,
        value and headers, and the fixed-width cells beside them."""
        size = RECORD_FIXED_BYTES + len(self.key or b"") + len(self.value or b"")
        for key, value in self.headers:
            size += HEADER_FIXED_BYTES + len(key.encode()) + len(value or b"")
        return size


class PartitionsFenced(Exception):
    """Raised by a sink's ``write`` or ``publish`` after it wrote the rest of a batch: another
    member has claimed ``partitions`` since the batch was read, so their rows were not
    written. The consumer commits nothing of them (their new owner reads them again) and does
    not retry.

    ``taken``: those of them whose latest claim by this writer (not an older one it has
    replaced since) another writer overwrote. A member the group still gives them to claims
    them again: the other claim came from a member that lost them while its claim waited,
    or from one paused past its session."""

    def __init__(
        self,
        partitions: frozenset[TopicPartition],
        taken: frozenset[TopicPartition] = frozenset(),
    ) -> None:
        self.partitions = partitions
        self.taken = taken & partitions
        names = ", ".join(f"{tp.topic}:{tp.partition}" for tp in sorted(partitions))
        super().__init__(f"partitions claimed by another member, not written: {names}")


@runtime_checkable
class Sink(Protocol):
    """Receives one topic's part of a batch as one Arrow table (:data:`SINK_SCHEMA`: offset,
    timestamp, key, value, headers, partition), whichever record path fetched it. ``write``
    must raise on failure: the SDK then retries with backoff and never commits past the
    failed records; :class:`PartitionsFenced` for partitions another member claimed
    meanwhile. A sink that wants Records reads the table through :class:`RecordsView` (or
    is a :class:`CallbackSink`)."""

    async def write(self, topic: str, table: pa.Table) -> None:
        """Persist ``table`` (all of ``topic``, in offset order per partition)."""
        ...

    async def resume_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, int]:
        """Next offset to read per partition if the sink already holds data past the
        committed offset (exactly-once resume); empty if it does not track offsets."""
        ...


@runtime_checkable
class FencingSink(Sink, Protocol):
    """A sink that stays exactly once while a member that lost partitions still writes them:
    once the next owner has asked :meth:`resume_offsets` for a partition, an earlier owner's
    write of it either landed before (and the answer includes it) or is refused
    (:class:`PartitionsFenced`) or deduplicated. The consumer can then give revoked partitions
    up at once instead of writing them first (``ConsumerConfig.revoke_mode``)."""

    def fences_lost_partitions(self) -> bool:
        """True if the guarantee above holds (it may depend on the sink's configuration)."""
        ...


@runtime_checkable
class TopicIdentitySink(Protocol):
    """A sink that records which topic its offsets were read from (Kafka's topic id), so a
    topic deleted and created again under its name is not taken for the one before (whose
    offsets would make the new topic's first records look stored already)."""

    def use_topic_ids(self, ids: Mapping[str, str]) -> None:
        """Kafka's current id of each topic; called before :meth:`Sink.resume_offsets`."""
        ...


@runtime_checkable
class ManagedSink(Sink, Protocol):
    """A sink with a start-up cost (a Spark session) and resources to release: the consumer
    starts it before joining the group and closes it after leaving."""

    async def start(self) -> None:
        """Acquire what writes need; called once, before the first assignment."""
        ...

    async def close(self) -> None:
        """Release it; called once, after the last write."""
        ...


@runtime_checkable
class PreparingSink(Protocol):
    """A sink with set-up per topic (creating a table): the consumer asks for it once, after
    ``start`` and before joining, so the first batch does not pay it and a misconfigured
    topic fails the start instead of the first write."""

    async def prepare(self, topics: Sequence[str]) -> None:
        """Set up everything writes to ``topics`` need; raise if that cannot be done."""
        ...


@runtime_checkable
class StagingSink(Sink, Protocol):
    """A sink whose write splits into a slow part that makes nothing visible (``stage``)
    and a quick part that does (``publish``). The consumer then stages a batch while the
    batch before it is still being written, and publishes batches in the order they were
    read, so the slow part never waits for the previous batch's hand-over. ``write`` stays
    the two in one call (the consumer uses it to retry a batch whose publish failed)."""

    async def stage(self, topic: str, table: pa.Table) -> object:
        """Prepare ``table`` (as for ``write``) without making any of it visible; may run
        while earlier batches of the same topic are staged or published. Returns what
        ``publish`` or ``discard`` is given."""
        ...

    async def publish(self, staged: object) -> None:
        """Make a staged batch visible. Called once per staged batch, after every earlier
        batch of its topic was published. Raises on failure."""
        ...

    async def discard(self, staged: object) -> None:
        """Drop a staged batch that will not be published (or whose publish failed)."""
        ...


def headers_column(records: Sequence[Record]) -> pa.Array:
    """The records' headers as a :data:`HEADERS` column."""
    # Empty lists, not nulls: PySpark cannot convert a sliced list column with a null bitmap.
    if not any(r.headers for r in records):  # the common case, without a list per record
        offsets = pa.array([0] * (len(records) + 1), pa.int32())
        return pa.ListArray.from_arrays(offsets, pa.array([], HEADERS.value_type), type=HEADERS)
    return pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in records], HEADERS)


def records_table(records: Sequence[Record]) -> pa.Table:
    """Records (of one topic) as the table a sink is given: what the ``records`` record
    path hands over, and a convenience for tests and sinks fed by hand."""
    return pa.Table.from_arrays(
        [
            pa.array([r.offset for r in records], pa.int64()),
            pa.array([r.timestamp for r in records], pa.int64()),
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            headers_column(records),
            pa.array([r.partition for r in records], pa.int32()),
        ],
        schema=SINK_SCHEMA,
    )


class RecordsView(Sequence[Record]):
    """A topic's table seen as a sequence of Records, built only when read: what a
    record-at-a-time sink gets on the columnar path (``len`` costs nothing)."""

    def __init__(self, topic: str, table: pa.Table) -> None:
        self.topic = topic
        self.table = table
        self._records: list[Record] | None = None

    def __len__(self) -> int:
        return int(self.table.num_rows)

    @overload
    def __getitem__(self, index: int) -> Record: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Record]: ...
    def __getitem__(self, index: int | slice) -> Record | Sequence[Record]:
        return self._materialise()[index]

    def __iter__(self) -> Iterator[Record]:
        return iter(self._materialise())

    def _materialise(self) -> list[Record]:
        if self._records is None:
            columns = self.table.to_pydict()
            headers = [tuple((h["key"], h["value"]) for h in hs) for hs in columns["headers"]]
            self._records = [
                Record(self.topic, *row)
                for row in zip(
                    columns["partition"],
                    columns["offset"],
                    columns["timestamp"],
                    columns["key"],
                    columns["value"],
                    headers,
                    strict=True,
                )
            ]
        return self._records


WriteFunction = Callable[[str, Sequence[Record]], Awaitable[None] | None]


class CallbackSink:
    """A sink that hands each topic's records to a user function (sync or async), as a
    :class:`RecordsView` of the batch's table: a function that reads only some records, or
    only counts them, never builds the rest.

    A plain (sync) function runs in a worker thread of this sink's, one call at a time: a
    slow write, an fsync or the Records it builds would otherwise hold the consumer's event
    loop, and the group's heartbeats with it; the consumer stops it when it closes (the sink
    is a :class:`ManagedSink`). An async function runs on the loop."""

    def __init__(self, function: WriteFunction) -> None:
        if not callable(function):
            raise TypeError(f"function must be callable, got {function!r}")
        self._function = function
        self._is_async = inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
            getattr(function, "__call__", None)  # noqa: B004 - an object with async __call__
        )
        self._worker: ThreadPoolExecutor | None = None

    async def write(self, topic: str, table: pa.Table) -> None:
        """Call the user function with the table's Records; await it if it returns an
        awaitable."""
        view = RecordsView(topic, table)
        if self._is_async:
            result = self._function(topic, view)
        else:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(1, thread_name_prefix="callback-sink")
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self._worker, self._function, topic, view)
        if inspect.isawaitable(result):
            await result

    async def resume_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, int]:
        """A callback tracks no offsets: resume from the committed ones."""
        return {}

    async def start(self) -> None:
        """Nothing to acquire: the worker thread starts with the first write."""

    async def close(self) -> None:
        """Stop the worker thread once its call in progress returns (a later write starts
        another): a consumer that stopped leaves no thread of this sink behind."""
        worker, self._worker = self._worker, None
        if worker is not None:
            await asyncio.to_thread(worker.shutdown, wait=True)
