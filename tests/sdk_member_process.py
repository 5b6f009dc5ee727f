"""A consumer member as a real process, for kill -9 and SIGTERM tests.

``python -m tests.sdk_member_process BOOTSTRAP GROUP TOPIC IDENTITY OUT_FILE``: every record
handed to the sink is appended to OUT_FILE as ``partition offset`` and fsynced before the
write returns (so the file is the "table", and the commit comes after it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer
from consumer_sdk.sink import CallbackSink, Record


def main(argv: Sequence[str]) -> int:
    bootstrap, group, topic, identity, out = argv
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
        session_timeout_ms=1500,
        heartbeat_interval_ms=100,
        leader_delay_secs=0.1,
        wait_time_secs=0.3,
    )
    AutoscalingConsumer(config, CallbackSink(write)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
