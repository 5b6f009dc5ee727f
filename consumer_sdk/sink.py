"""Where batches go: the :class:`Sink` protocol, and a sink that calls a user function."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from assignor import TopicPartition


class Record(NamedTuple):
    """One Kafka record as the sink sees it (a named tuple: built once per record on the hot
    path, about 3x cheaper than a frozen dataclass)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()

    @property
    def size(self) -> int:
        """Bytes of key and value (what BATCH_BYTES counts)."""
        return len(self.key or b"") + len(self.value or b"")


@runtime_checkable
class Sink(Protocol):
    """Receives one topic's part of a batch. ``write`` must raise on failure: the SDK then
    retries with backoff and never commits past the failed records."""

    async def write(self, topic: str, records: Sequence[Record]) -> None:
        """Persist ``records`` (all of ``topic``, in offset order per partition)."""
        ...

    async def resume_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, int]:
        """Next offset to read per partition if the sink already holds data past the
        committed offset (exactly-once resume); empty if it does not track offsets."""
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


WriteFunction = Callable[[str, Sequence[Record]], Awaitable[None] | None]


class CallbackSink:
    """A sink that hands each topic's records to a user function (sync or async)."""

    def __init__(self, function: WriteFunction) -> None:
        if not callable(function):
            raise TypeError(f"function must be callable, got {function!r}")
        self._function = function

    async def write(self, topic: str, records: Sequence[Record]) -> None:
        """Call the user function; await it if it returns an awaitable."""
        result = self._function(topic, records)
        if inspect.isawaitable(result):
            await result

    async def resume_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, int]:
        """A callback tracks no offsets: resume from the committed ones."""
        return {}
