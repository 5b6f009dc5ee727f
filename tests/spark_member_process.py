"""A consumer member writing Spark tables, as a real process (concurrency and kill -9 tests).

``python -m tests.spark_member_process BOOTSTRAP GROUP TOPIC IDENTITY WAREHOUSE DATABASE
[--table-format F] [--iceberg-catalog C] [--die-after-write] [--remote sc://...]
[--session-timeout-ms N] [--share]``. With
``--die-after-write`` the process kills itself with SIGKILL right after its first table write
that held records, before the offsets are committed to Kafka. With ``--share`` it is a
share-group member (KIP-932), and dies after its first write before acknowledging it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence

import pyarrow as pa

from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_sink import SparkTableSink, StagedBatch
from consumer_sdk.share import ShareMember


class DyingSink(SparkTableSink):
    """Dies (SIGKILL) after the first publish (or share write) lands in the table, before
    any commit or acknowledgement."""

    def publish_blocking(self, staged: StagedBatch) -> None:
        super().publish_blocking(staged)
        os.kill(os.getpid(), signal.SIGKILL)

    def write_once_blocking(self, topic: str, table: pa.Table) -> None:
        super().write_once_blocking(topic, table)
        os.kill(os.getpid(), signal.SIGKILL)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "group", "topic", "identity", "warehouse", "database"):
        parser.add_argument(name)
    parser.add_argument("--die-after-write", action="store_true")
    parser.add_argument("--value-format", default="text")
    parser.add_argument("--table-format", default="delta")
    parser.add_argument("--iceberg-catalog", default="lake")
    parser.add_argument("--remote", default="", help="Spark Connect URL (default: local[1])")
    # Short by default: a killed or paused member's partitions move quickly.
    parser.add_argument("--session-timeout-ms", type=int, default=1500)
    parser.add_argument("--share", action="store_true", help="a share-group member")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
    sink_config = SparkSinkConfig(
        warehouse=args.warehouse,
        database=args.database,
        value_format=args.value_format,
        table_format=args.table_format,
        iceberg_catalog=args.iceberg_catalog,
        master="local[1]",
        spark_remote=args.remote,
    )
    sink = (DyingSink if args.die_after_write else SparkTableSink)(sink_config)
    config = ConsumerConfig(
        bootstrap_servers=args.bootstrap,
        group=args.group,
        topics=(args.topic,),
        capacity=10.0,
        member_identity=args.identity,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=min(500, args.session_timeout_ms // 15),
        leader_delay_secs=0.1,
        wait_time_secs=0.5,
        group_type="share" if args.share else "consumer",
    )
    if args.share:
        member = ShareMember(config, sink)
        member.run()
        print(f"wrote {member.records_written} records", flush=True)
    else:
        AutoscalingConsumer(config, sink).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
