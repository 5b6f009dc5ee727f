"""A share-group (KIP-932) consumer with no code of kafka-autoscaler in it: confluent-kafka's
``ShareConsumer`` (preview in librdkafka 2.16), explicit acknowledgement after the work. Each
record costs ``1 / --records-per-second`` seconds of work (a consumer's capacity C); each
acknowledged record's partition, offset, write time and when its work was done are appended to
a JSON-lines file (the format of ``kip848_consumer.py``). A poll returns half a second of work
at most (see ``--max-poll-records``). SIGTERM closes it.

    kafka-autoscaler-sidecar --group-type share --scaler local --capacity 200 \\
        --consumer-command "python examples/share_consumer.py --bootstrap-servers HOST:9092 \\
            --group G --topic T --records-per-second 200 --out out/{identity}.jsonl" ...
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

from confluent_kafka import KafkaException, Message, ShareConsumer


def row(record: Message) -> dict[str, Any]:
    """Where a record was, when it was written (ms) and when its work was done (s). (Each
    example stands alone, so this is kip848_consumer.py's own.)"""
    return {
        "partition": record.partition(),
        "offset": record.offset(),
        "ts": record.timestamp()[1],
        "done": time.time(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Consume until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records-per-second", type=float, default=0.0, help="0: no work")
    parser.add_argument("--out", required=True, help="JSON-lines file the records go to")
    parser.add_argument(
        "--max-poll-records",
        type=int,
        default=0,
        help="records a poll returns at most (0: half a second of work, at least 1)",
    )
    args = parser.parse_args(argv)
    if args.records_per_second < 0:
        parser.error("--records-per-second must be >= 0 (0: no work)")
    cost = 1.0 / args.records_per_second if args.records_per_second else 0.0
    stopping = False

    def stop(_signal: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    settings: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_servers,
        "group.id": args.group,
        "share.acknowledgement.mode": "explicit",
    }
    # A share partition lets only share.partition.max.record.locks records (2000 by default)
    # be acquired at once, and a record stays acquired until its whole poll is worked through:
    # long polls cap the partition's throughput at 2000 / that time, whatever the members.
    half_a_second = math.ceil(args.records_per_second / 2) if args.records_per_second else 0
    if args.max_poll_records or half_a_second:
        settings["max.poll.records"] = args.max_poll_records or half_a_second
    consumer = ShareConsumer(settings)
    consumer.subscribe([args.topic])
    try:
        with open(args.out, "a", encoding="utf-8") as out:
            while not stopping:
                started = time.monotonic()
                records = [r for r in consumer.poll(0.2) if r.error() is None]
                if records:
                    # The work: the batch's cost, less the time polling took.
                    time.sleep(max(0.0, cost * len(records) - (time.monotonic() - started)))
                for record in records:
                    out.write(json.dumps(row(record)))
                    out.write("\n")
                if records:
                    out.flush()
                    for record in records:
                        consumer.acknowledge(record)
                    consumer.commit_sync()
    except KafkaException as exc:
        print(f"share_consumer: {exc}", file=sys.stderr)
        return 1
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
