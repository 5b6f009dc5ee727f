"""The speed snapshot codec (round trip, validation naming the field, freshness) and the
consumers' snapshot cache under hostile records and an unreachable broker."""

from __future__ import annotations

import asyncio
import json

import pytest

from assignor import TopicPartition
from assignor.backlog import DrainRule
from consumer_sdk.snapshot_cache import MAX_CLOCK_SKEW_S, SnapshotCache
from contract.local_ports import free_port
from contract.snapshot import (
    PartitionStat,
    Snapshot,
    SnapshotError,
    decode,
    newest_of_group,
    speeds_topic,
)

TP = TopicPartition("orders", 3)


def sample(**changes: object) -> dict[str, object]:
    raw: dict[str, object] = {
        "version": 1,
        "group": "g",
        "sequence": 4,
        "timestamp": 1000.0,
        "unit": "records/s",
        "topics": {"orders": {"partition": [3], "speed": [12.5], "lag": [7], "end_offset": [900]}},
    }
    raw.update(changes)
    return raw


def columns(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {"partition": [0], "speed": [1], "lag": [0], "end_offset": [0]}
    base.update(changes)
    return {"t": base}


def test_round_trip() -> None:
    snapshot = Snapshot("g", 4, 1000.0, "bytes/s", {TP: PartitionStat(12.5, 7.0, 900)})
    decoded = decode(snapshot.encode())
    assert decoded == snapshot
    assert decoded.speeds == {TP: 12.5} and decoded.lags == {TP: 7.0}
    assert speeds_topic("g") == "g.autoscaler.speeds"
    assert decoded.drain is None  # sidecars before the drain rule: speeds are packed as is


def test_round_trip_with_the_drain_rule() -> None:
    rule = DrainRule(drain_seconds=30.0, allowance_seconds=5.0)
    snapshot = Snapshot("g", 4, 1000.0, "records/s", {TP: PartitionStat(1.0, 2.0, 3)}, rule)
    assert decode(snapshot.encode()).drain == rule


def test_round_trip_with_a_measured_capacity_and_a_bad_one_named() -> None:
    snapshot = Snapshot("g", 4, 1000.0, "records/s", {TP: PartitionStat(1.0, 2.0, 3)}, None, 2310.5)
    assert decode(snapshot.encode()).capacity == 2310.5
    for bad in (0, -1, "fast", float("inf")):
        with pytest.raises(SnapshotError, match="capacity must be a finite number > 0"):
            decode(json.dumps({**sample(), "capacity": bad}))


def test_the_newest_snapshot_of_a_group_is_found_among_other_groups_and_bad_records() -> None:
    def taken(group: str, sequence: int, timestamp: float) -> bytes:
        return Snapshot(group, sequence, timestamp, "records/s", {}, None, 10.0 * sequence).encode()

    values = [taken("g", 7, 1000.0), None, b"{", taken("g", 9, 1001.0), taken("other", 99, 2000.0)]
    newest = newest_of_group([*values, taken("g", 8, 1001.0)], "g")
    assert newest is not None and (newest.sequence, newest.capacity) == (9, 90.0)
    assert newest_of_group(values, "absent") is None and newest_of_group([], "g") is None


def test_freshness() -> None:
    snapshot = decode(json.dumps(sample()))
    assert snapshot.is_fresh(now=1010.0, max_age_s=30)
    assert not snapshot.is_fresh(now=1031.0, max_age_s=30)
    assert not snapshot.is_fresh(now=900.0, max_age_s=30)  # from the future: clock skew


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\xff\xfe", "not JSON"),
        (json.dumps([1]), "must be a JSON object"),
        (json.dumps(sample(version=2)), "version must be 1, got 2"),
        (json.dumps(sample(group="")), "group must be a non-empty string"),
        (json.dumps(sample(unit="MB/h")), "unit must be one of records/s, bytes/s"),
        (json.dumps(sample(sequence=-1)), "sequence must be an integer >= 0"),
        (json.dumps(sample(timestamp="now")), "timestamp must be a finite number"),
        (json.dumps(sample(topics=[])), "topics must be an object"),
        (json.dumps(sample(drain=30)), "drain must be an object of seconds, allowance_seconds"),
        (
            json.dumps(sample(drain={"seconds": 0, "allowance_seconds": 5})),
            "drain.seconds must be a finite number > 0, got 0",
        ),
        (
            json.dumps(sample(drain={"seconds": 30})),
            "drain.allowance_seconds must be a finite number >= 0, got None",
        ),
        (json.dumps(sample(topics={"t": []})), r"topics\['t'\] must be an object of columns"),
        (
            json.dumps(sample(topics=columns(speed=[-1]))),
            r"topics\['t'\].speed\[0\] must be a finite number >= 0, got -1",
        ),
        (
            json.dumps(sample(topics=columns(partition=[1.5]))),
            r"topics\['t'\].partition\[0\] must be an integer >= 0",
        ),
        (json.dumps(sample(topics=columns(lag="x"))), r"topics\['t'\].lag must be a list"),
        (json.dumps(sample(topics=columns(speed=[1, 2]))), "columns must have equal lengths"),
        (
            json.dumps(
                sample(
                    topics=columns(partition=[0, 0], speed=[1, 1], lag=[0, 0], end_offset=[0, 0])
                )
            ),
            "lists a partition twice",
        ),
        (
            '{"version": 1, "group": "g", "unit": "records/s", "sequence": 1, '
            '"timestamp": NaN, "topics": {}}',
            "timestamp must be a finite number",
        ),
        # Hostile inputs that used to raise outside SnapshotError and kill the reader.
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (json.dumps(sample(sequence=10**400)), "sequence must be an integer >= 0"),
        (json.dumps(sample(timestamp=10**400)), "timestamp must be a finite number"),
        (json.dumps(sample(sequence=2**63)), "sequence must be an integer >= 0"),
        (
            json.dumps(sample(topics=columns(end_offset=[10**30]))),
            r"topics\['t'\].end_offset\[0\] must be an integer >= 0",
        ),
        (json.dumps(sample(topics=columns(speed=[10**400]))), "must be a finite number >= 0"),
        ('{"sequence": ' + "9" * 5000 + "}", "not JSON"),
    ],
)
def test_malformed_snapshots_name_the_field(raw: bytes | str, message: str) -> None:
    with pytest.raises(SnapshotError, match=message):
        decode(raw)


class ManualClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_cache_survives_hostile_records_and_refuses_the_future() -> None:
    clock = ManualClock(1000.0)
    cache = SnapshotCache("127.0.0.1:1", "speeds", "g", max_age_s=30, clock=clock)
    for hostile in (
        b"[" * 100_000,
        json.dumps(sample(sequence=10**400)).encode(),
        b'{"timestamp": ' + b"1" * 5000 + b"}",
        None,
    ):
        cache.offer(hostile)
    assert cache.counters.malformed == 4 and cache.latest is None
    # A valid snapshot stamped a year ahead is refused, so it cannot pin "latest".
    cache.offer(json.dumps(sample(timestamp=1000.0 + 365 * 86400, sequence=99)).encode())
    assert cache.counters.from_future == 1 and cache.latest is None
    # Within the skew bound it is taken; real ones after it keep coming in.
    cache.offer(json.dumps(sample(timestamp=1000.0 + MAX_CLOCK_SKEW_S / 2)).encode())
    assert cache.latest is not None
    clock.now = 1100.0
    cache.offer(json.dumps(sample(timestamp=1099.0, sequence=5)).encode())
    assert cache.latest is not None and cache.latest.timestamp == 1099.0
    assert cache.view() is not None


def test_the_reader_outlives_an_unreachable_broker() -> None:
    """Started while no broker answers, the reader keeps retrying (counted) instead of
    dying; stop() ends it at once."""

    async def run() -> tuple[int, bool]:
        cache = SnapshotCache(f"127.0.0.1:{free_port()}", "speeds", "g", max_age_s=30)
        await cache.start(catch_up_timeout_s=10)
        for _ in range(400):  # bounded: at most 20 s
            if cache.counters.reader_failures:
                break
            await asyncio.sleep(0.05)
        alive = cache._task is not None and not cache._task.done()
        await cache.stop()
        return cache.counters.reader_failures, alive

    failures, alive = asyncio.run(run())
    assert failures >= 1 and alive
