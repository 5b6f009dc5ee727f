"""A consumer member as a real process, for kill -9 and SIGTERM tests.

``python -m benchmarks.support.sdk_member_process BOOTSTRAP GROUP TOPIC IDENTITY OUT_FILE
[SESSION_TIMEOUT_MS]``: every record
handed to the sink is appended to OUT_FILE as ``partition offset`` and fsynced before the
write returns (so the file is the "table", and the commit comes after it). On a clean exit
the member writes OUT_FILE.stats.json: how often it lost its membership, and its event
loop's lateness (see :func:`member_stats`). The kill -9 test and benchmarks.loop_stalls read
both with :func:`read_rows` and :func:`stats_path`.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer
from consumer_sdk.sink import CallbackSink, Record


def member_stats(consumer: AutoscalingConsumer) -> dict[str, Any]:
    """What the oversubscription test and benchmark read of a member that exited."""
    watch = consumer.loop_watch
    lost = REGISTRY.get_sample_value(
        "autoscaler_consumer_membership_lost_total", {"group": consumer.config.group}
    )
    return {
        "membership_lost": int(lost or 0),
        "session_timeout_s": consumer.config.session_timeout_ms / 1000,
        "lateness_p50_s": watch.quantile(0.5),
        "lateness_p99_s": watch.quantile(0.99),
        "lateness_worst_s": watch.worst_s,
        "wake_ups": len(watch.recent),
        "stall_sites": dict(watch.stall_sites),
    }


def read_rows(path: Path) -> Counter[tuple[int, int]]:
    """The (partition, offset) a member wrote to ``path``, with how often."""
    if not path.exists():
        return Counter()
    rows: Counter[tuple[int, int]] = Counter()
    for line in path.read_text().splitlines():
        partition, offset = line.split()
        rows[(int(partition), int(offset))] += 1
    return rows


def stats_path(out: Path) -> Path:
    """Where the member whose rows go to ``out`` writes its exit statistics."""
    return out.with_name(out.name + ".stats.json")


def main(argv: Sequence[str]) -> int:
    bootstrap, group, topic, identity, out = argv[:5]
    session_timeout_ms = int(argv[5]) if len(argv) > 5 else 1500
    handle = open(out, "a")  # noqa: SIM115 - lives as long as the process

    def write(_topic: str, records: Sequence[Record]) -> None:
        handle.write("".join(f"{r.partition} {r.offset}\n" for r in records))
        handle.flush()
        os.fsync(handle.fileno())

    config = ConsumerConfig(
        bootstrap_servers=bootstrap,
        group=group,
        topics=(topic,),
        capacity=10.0,
        member_identity=identity,
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=min(1000, session_timeout_ms // 15),
        leader_delay_secs=0.1,
        wait_time_secs=0.3,
    )
    consumer = AutoscalingConsumer(config, CallbackSink(write))
    consumer.run()
    stats_path(Path(out)).write_text(json.dumps(member_stats(consumer)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
