"""CallbackSink's worker thread: the user's sync function runs off the event loop, and
closing the sink (the consumer does it when it stops) leaves no thread behind."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from consumer_sdk.sink import CallbackSink, ManagedSink, Record, records_table


def _sink_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("callback-sink")]


def test_the_worker_thread_runs_the_function_and_stops_when_the_sink_closes() -> None:
    calls: list[tuple[str, int, str]] = []

    def write(topic: str, records: Sequence[Record]) -> None:
        calls.append((topic, len(records), threading.current_thread().name))

    sink = CallbackSink(write)
    assert isinstance(sink, ManagedSink)
    table = records_table([Record("t", 0, 5, 1, b"k", b"v", ())])

    async def scenario() -> tuple[int, int, int]:
        await sink.start()
        await sink.write("t", table)
        running = len(_sink_threads())
        await sink.close()
        after_close = len(_sink_threads())
        await sink.write("t", table)  # a later write starts another worker
        await sink.close()
        return running, after_close, len(_sink_threads())

    assert asyncio.run(scenario()) == (1, 0, 0)
    assert [(topic, count) for topic, count, _ in calls] == [("t", 1), ("t", 1)]
    assert all(name.startswith("callback-sink") for _, _, name in calls)


def test_an_async_function_runs_on_the_loop_and_closing_needs_no_thread() -> None:
    seen: list[int] = []

    async def write(topic: str, records: Sequence[Record]) -> None:
        seen.extend(r.offset for r in records)

    sink = CallbackSink(write)

    async def scenario() -> None:
        await sink.write("t", records_table([Record("t", 0, 7, 1, None, b"v", ())]))
        await sink.close()

    asyncio.run(scenario())
    assert seen == [7]
    assert _sink_threads() == []
