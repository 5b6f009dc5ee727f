"""A KIP-848 consumer with no code of kafka-autoscaler in it: plain confluent-kafka with
``group.protocol=consumer``, ``group.remote.assignor=autoscaler`` and a ``group.instance.id``
(the name the sidecar's plans give it). A fatal error ends it with exit code 1 and one line
on stderr. Each record costs ``1 / --records-per-second`` seconds
of work (a consumer's capacity; 0: none); it appends each record's partition, offset, write
time and when its work was done to a JSON-lines file and commits after writing; SIGTERM closes
it (it leaves the group). ``-X key=value`` adds a librdkafka property, as kcat does, and
``--properties-file`` reads them from a file of ``key=value`` lines (a secured cluster's
settings: a password there stays out of the process list).

    kafka-autoscaler-sidecar --group-protocol consumer --scaler local \\
        --consumer-command "python examples/kip848_consumer.py --bootstrap-servers HOST:9092 \\
            --group G --topic T --instance-id {identity} --out out/{identity}.jsonl" ...
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message


def row(record: Message) -> dict[str, Any]:
    """What the output file keeps of a record: where it was, when it was written (ms) and when
    its work was done (s)."""
    return {
        "partition": record.partition(),
        "offset": record.offset(),
        "ts": record.timestamp()[1],
        "done": time.time(),
    }


def property_pair(text: str) -> tuple[str, str]:
    """``key=value`` as a pair (argparse's type for ``-X``)."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"key=value (a librdkafka property), not {text!r}")
    return key.strip(), value


def properties_file(path: str) -> list[tuple[str, str]]:
    """The ``key=value`` lines of ``path`` (blank lines and ``#`` comments skipped)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{exc.strerror}: {path}") from None
    return [
        property_pair(line.strip())
        for line in lines
        if line.strip() and not line.strip().startswith("#")
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Consume until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--instance-id", required=True)
    parser.add_argument("--out", required=True, help="JSON-lines file the records go to")
    parser.add_argument("--records-per-second", type=float, default=0.0, help="0: no work")
    parser.add_argument(
        "-X",
        dest="properties",
        type=property_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka property (repeatable), e.g. -X security.protocol=SASL_SSL",
    )
    parser.add_argument(
        "--properties-file",
        type=properties_file,
        default=[],
        help="a file of librdkafka properties, one key=value per line (-X wins)",
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
    consumer = Consumer(
        {
            **dict(args.properties_file),
            **dict(args.properties),
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
                started = time.monotonic()
                records = consumer.consume(500, 0.2)
                for record in records:
                    error = record.error()
                    # librdkafka hands a fatal error over as a record error _FATAL (whose
                    # own fatal() is False); this consumer would never read again.
                    if error is not None and (error.code() == KafkaError._FATAL or error.fatal()):
                        raise KafkaException(error)
                good = [r for r in records if r.error() is None]
                if good:
                    # The work: the batch's cost, less the time polling took.
                    time.sleep(max(0.0, cost * len(good) - (time.monotonic() - started)))
                for record in good:
                    out.write(json.dumps(row(record)))
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
