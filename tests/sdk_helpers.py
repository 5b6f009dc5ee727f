"""Run AutoscalingConsumer members for tests: in threads (own loop each) or processes."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer, RetryPolicy
from consumer_sdk.sink import CallbackSink, Record, Sink
from contract.snapshot import Snapshot

# Short timings for the embedded broker (docs/architecture.md section 7).
FAST_GROUP = {
    "session_timeout_ms": 1500,
    "heartbeat_interval_ms": 100,
    "leader_delay_secs": 0.1,
    "wait_time_secs": 0.3,
}


class SeenRecords:
    """Thread-safe count of (topic, partition, offset) handed to sinks."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, int, int]] = Counter()
        self._lock = threading.Lock()

    def write(self, topic: str, records: Sequence[Record]) -> None:
        with self._lock:
            for r in records:
                self.counts[(r.topic, r.partition, r.offset)] += 1

    def total(self) -> int:
        with self._lock:
            return len(self.counts)

    def keys(self) -> set[tuple[str, int, int]]:
        with self._lock:
            return set(self.counts)

    def duplicates(self) -> int:
        with self._lock:
            return sum(n - 1 for n in self.counts.values())


class ThreadedMember:
    """One consumer in its own thread and event loop (members must not share a loop: the
    leader's delay in assign() would block the followers' SyncGroup)."""

    def __init__(self, config: ConsumerConfig, sink: Sink, retry: RetryPolicy | None = None):
        self.config = config
        self.consumer: AutoscalingConsumer | None = None
        self._sink, self._retry = sink, retry
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=config.member_identity)

    def start(self) -> ThreadedMember:
        self._thread.start()
        assert self._ready.wait(30), "member did not start"
        return self

    def _main(self) -> None:
        async def go() -> None:
            self._loop = asyncio.get_running_loop()
            self.consumer = AutoscalingConsumer(self.config, self._sink, retry=self._retry)
            self._ready.set()
            await self.consumer.run_async()

        try:
            asyncio.run(go())
        except BaseException as exc:  # surfaced by stop()
            self.error = exc
            self._ready.set()

    def stop(self) -> None:
        if self._thread.is_alive() and self._loop is not None and self.consumer is not None:
            self._loop.call_soon_threadsafe(self.consumer.request_stop)
        self._thread.join(30)
        assert not self._thread.is_alive(), "member did not stop"
        if self.error is not None:
            raise self.error


def member_config(
    kafka: str, group: str, topics: Sequence[str], identity: str, **overrides: Any
) -> ConsumerConfig:
    values: dict[str, Any] = {**FAST_GROUP, "capacity": 10.0, **overrides}
    return ConsumerConfig(
        bootstrap_servers=kafka,
        group=group,
        topics=tuple(topics),
        member_identity=identity,
        **values,
    )


def start_members(
    kafka: str,
    group: str,
    topics: Sequence[str],
    count: int,
    sink: Callable[[str, Sequence[Record]], None],
    **overrides: Any,
) -> list[ThreadedMember]:
    return [
        ThreadedMember(
            member_config(kafka, group, topics, f"sink-{i}", **overrides), CallbackSink(sink)
        ).start()
        for i in range(count)
    ]


def wait_until(condition: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """Poll ``condition`` every 50 ms until true or timeout; returns its last value."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def group_stable(members: Sequence[ThreadedMember], partitions: int) -> bool:
    """Every partition assigned to exactly one member."""
    owned = [m.consumer.assigned for m in members if m.consumer is not None]
    flat = [tp for held in owned for tp in held]
    return len(owned) == len(members) and len(flat) == len(set(flat)) == partitions


def publish_snapshot(kafka: str, topic: str, snapshot: Snapshot | bytes) -> None:
    """Write one snapshot record (or raw bytes) to the speeds topic."""
    producer = Producer({"bootstrap.servers": kafka})
    value = snapshot if isinstance(snapshot, bytes) else snapshot.encode()
    producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def group_settled(members: Sequence[ThreadedMember], partitions: int) -> bool:
    """Stable, and what the members hold is what some leader planned for all of them (a
    lone early member holding everything before the others joined does not count)."""
    if not group_stable(members, partitions):
        return False
    actual = sorted(sorted(m.consumer.assigned) for m in members if m.consumer is not None)
    for member in members:
        plan = member.consumer.plugin_stats.last_plan if member.consumer else None
        if plan is None or len(plan.assignment) != len(members):
            continue
        if sorted(sorted(tps) for tps in plan.assignment.values()) == actual:
            return True
    return False


def sidecar_status(port: int) -> dict[str, Any]:
    """A local sidecar's /status, or {} while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as page:
            return dict(json.loads(page.read()))
    except OSError:
        return {}


# Stderr read while a sidecar process runs, by pid (start_sidecar_process): a sidecar whose
# consumers write much (librdkafka retrying a refused login) would otherwise fill the pipe
# and block on its own next log line.
_DRAINED: dict[int, tuple[threading.Thread, list[str]]] = {}


def start_sidecar_process(
    args: Sequence[str], env: dict[str, str], cwd: Path
) -> subprocess.Popen[str]:
    """``python -m sidecar.cli ARGS`` with its stderr read as it comes (for
    :func:`stop_sidecar_process`)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "sidecar.cli", *args],
        env=env,
        cwd=cwd,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    stream = process.stderr
    assert stream is not None
    reader = threading.Thread(target=lambda: lines.extend(stream), daemon=True)
    reader.start()
    _DRAINED[process.pid] = (reader, lines)
    return process


def stop_sidecar_process(process: subprocess.Popen[str]) -> str:
    """SIGTERM a sidecar CLI process; check it exits 0 without a traceback; its stderr."""
    process.send_signal(signal.SIGTERM)
    code = process.wait(30)
    drained = _DRAINED.pop(process.pid, None)
    if drained is not None:
        reader, lines = drained
        reader.join(10)
        errors = "".join(lines)
    else:
        assert process.stderr is not None
        errors = process.stderr.read()
    assert code == 0 and "Traceback" not in errors, errors[-2000:]
    return errors


def local_sidecar_env(
    kafka: str,
    topic: str,
    snapshot_topic: str,
    consumer_command: str,
    *,
    http_port: int,
    lock_file: str,
    capacity: float,
    max_replicas: int,
) -> dict[str, str]:
    """The environment of a sidecar CLI (``--scaler local``) sizing group ``g-<topic>`` on a
    test broker: short measuring windows, and groups that form quickly (its consumers read
    the same variables)."""
    return {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).parents[1]),
        "AUTOSCALER_BOOTSTRAP_SERVERS": kafka,
        "AUTOSCALER_GROUP": f"g-{topic}",
        "AUTOSCALER_TOPICS": topic,
        "AUTOSCALER_CAPACITY": f"{capacity:g}",
        "AUTOSCALER_SNAPSHOT_TOPIC": snapshot_topic,
        "AUTOSCALER_INTERVAL": "0.5",
        "AUTOSCALER_WINDOW": "4",
        "AUTOSCALER_MIN_WINDOW": "1.5",
        "AUTOSCALER_SCALER": "local",
        "AUTOSCALER_CONSUMER_COMMAND": consumer_command,
        "AUTOSCALER_IDENTITY_PREFIX": "sink",
        "AUTOSCALER_MAX_REPLICAS": str(max_replicas),
        "AUTOSCALER_HTTP_PORT": str(http_port),
        "AUTOSCALER_LOCK_FILE": lock_file,
        "AUTOSCALER_SESSION_TIMEOUT_MS": "1500",
        "AUTOSCALER_HEARTBEAT_INTERVAL_MS": "100",
        "AUTOSCALER_LEADER_DELAY_SECS": "0.1",
        "AUTOSCALER_WAIT_TIME_SECS": "0.3",
    }


def example_consumer_command(
    program: Path, bootstrap: str, topic: str, out: Path, *options: str
) -> str:
    """The shell command the local scaler runs for an example consumer of group ``g-<topic>``
    (``examples/``), writing into ``out/{identity}.jsonl``; ``options`` are added as they are."""
    words = [sys.executable, str(program), "--bootstrap-servers", bootstrap]
    words += ["--group", f"g-{topic}", "--topic", topic]
    command = " ".join(shlex.quote(word) for word in words)
    return " ".join([command, *options, "--out", f"{shlex.quote(str(out))}/{{identity}}.jsonl"])
