"""A KIP-848 consumer with no code of kafka-autoscaler in it: plain confluent-kafka with
``group.protocol=consumer``, ``group.remote.assignor=autoscaler`` and a ``group.instance.id``
(the name the sidecar's plans give it). It appends each record's partition and offset to a
JSON-lines file and commits after writing; SIGTERM closes it (it leaves the group).

    kafka-autoscaler-sidecar --group-protocol consumer --scaler local \\
        --consumer-command "python examples/kip848_consumer.py --bootstrap-servers HOST:9092 \\
            --group G --topic T --instance-id {identity} --out out/{identity}.jsonl" ...
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from confluent_kafka import Consumer, KafkaException


def main(argv: Sequence[str] | None = None) -> int:
    """Consume until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--instance-id", required=True)
    parser.add_argument("--out", required=True, help="JSON-lines file the records go to")
    args = parser.parse_args(argv)
    stopping = False

    def stop(_signal: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "group.id": args.group,
            "group.protocol": "consumer",
            "group.remote.assignor": "autoscaler",
            "group.instance.id": args.instance_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([args.topic])
    try:
        with open(args.out, "a", encoding="utf-8") as out:
            while not stopping:
                records = consumer.consume(500, 0.2)
                good = [r for r in records if r.error() is None]
                for record in good:
                    out.write(
                        json.dumps({"partition": record.partition(), "offset": record.offset()})
                    )
                    out.write("\n")
                if good:
                    out.flush()
                    consumer.commit(asynchronous=False)
    except KafkaException as exc:
        print(f"kip848_consumer: {exc}", file=sys.stderr)
        return 1
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
