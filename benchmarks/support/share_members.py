"""Share-group (KIP-932) members: confluent-kafka ``ShareConsumer`` (no code of ours) in
threads, recording from which partitions each received records in a window; a share group's
start at the log's beginning; and what SDK share members' logs say their merges skipped."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterable
from pathlib import Path

from confluent_kafka import ShareConsumer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)


def read_from_the_start(bootstrap: str, group: str, lock_duration_ms: int | None = None) -> None:
    """The group's share.auto.offset.reset=earliest (a share group starts at the log's end by
    default), so every record written is owed to it; with ``lock_duration_ms``, the group's
    record lock duration too (the broker bounds it, by default 15-60 s)."""
    entries = [
        ConfigEntry(
            "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
        )
    ]
    if lock_duration_ms is not None:
        entries.append(
            ConfigEntry(
                "share.record.lock.duration.ms",
                str(lock_duration_ms),
                incremental_operation=AlterConfigOpType.SET,
            )
        )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the answer is in
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


# SparkTableSink.write_once's log line for a merge.
_MERGED = re.compile(r"merged \d+ row\(s\) into (\w+), (\d+) already there")


def found_already_there(logs: Iterable[Path], tables: Collection[str] | None = None) -> int:
    """Rows SDK share members' merges found already in the tables (every table, or those
    named), read from the members' logs: records the group delivered again."""
    found = 0
    for path in logs:
        for table, count in _MERGED.findall(path.read_text(errors="replace")):
            found += int(count) if tables is None or table in tables else 0
    return found


class ShareMembers:
    """Share consumers of one group, each polled on a thread of its own. ``process_s``: time
    each member spends per record (the members' capacity is then 1 / process_s records/s)."""

    def __init__(self, bootstrap: str, group: str, topic: str, *, process_s: float = 0.0) -> None:
        self.bootstrap, self.group, self.topic, self.process_s = bootstrap, group, topic, process_s
        self.received: dict[str, Counter[int]] = {}
        self.errors: list[str] = []
        self._stops: dict[str, threading.Event] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    def join(self, name: str) -> None:
        """Start the member ``name``."""
        stop = threading.Event()
        self.received[name] = Counter()
        thread = threading.Thread(target=self._run, args=(name, stop), daemon=True)
        self._stops[name], self._threads[name] = stop, thread
        thread.start()

    def leave(self, name: str) -> None:
        """Close the member ``name`` and forget it."""
        self._stops.pop(name).set()
        self._threads.pop(name).join(timeout=30)
        with self._lock:
            del self.received[name]

    def _run(self, name: str, stop: threading.Event) -> None:
        consumer = ShareConsumer(
            {"bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": name}
        )
        consumer.subscribe([self.topic])
        try:
            while not stop.is_set():
                for message in consumer.poll(0.2):
                    if message.error() is not None:
                        self.errors.append(str(message.error()))
                        continue
                    partition = message.partition()
                    with self._lock:
                        self.received[name][-1 if partition is None else partition] += 1
                    if self.process_s:
                        time.sleep(self.process_s)
        finally:
            consumer.close()

    def reset(self) -> None:
        """Start a new window: forget what was received so far."""
        with self._lock:
            for counts in self.received.values():
                counts.clear()

    def readers(self) -> dict[int, set[str]]:
        """Partition -> the members that received its records in this window."""
        with self._lock:
            found: dict[int, set[str]] = {}
            for name, counts in self.received.items():
                for partition in counts:
                    found.setdefault(partition, set()).add(name)
            return found

    def close(self) -> None:
        """Close every member."""
        for name in list(self._stops):
            self.leave(name)
