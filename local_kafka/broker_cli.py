"""``kafka-autoscaler-broker``: run a local Kafka in the foreground and print its bootstrap
string.

``--kind embedded`` (default) runs librdkafka's mock cluster in this process; ``--kind
apache`` starts Apache Kafka KRaft nodes from the locked jars (Java 17 needed) and says on
stderr how long they took to be ready; ``--broker-assignor`` has them load our broker-side
assignors (KIP-848 ``autoscaler``, share groups) with the topics those read. With
``--control``, commands read from stdin (``create_topic NAME PARTITIONS [REPLICATION]``,
``broker_down ID``, ``broker_up ID``, and on the embedded broker ``set_rtt ID MS``,
``push_request_errors API CODE...``) are answered one line each (``ok`` or
``error <message>``), and the broker stops at end of input.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from assignor.validation import TOPIC_NAME_RULE, is_topic_name
from contract.share_loads import SHARE_LOADS_TOPIC
from local_kafka.apache_kafka import MAX_NODES, ApacheKafka
from local_kafka.embedded import BrokerHandle, EmbeddedKafka, EmbeddedKafkaError

MAX_PARTITIONS = 100_000
_PARTITIONS = re.compile(r"[0-9]{1,9}")
_BROKER_LIMITS = {"embedded": (1, 64), "apache": (1, MAX_NODES)}
# Commands every handle answers; the embedded broker also injects latency and errors.
_COMMON_COMMANDS = ("create_topic", "broker_down", "broker_up")
_EMBEDDED_COMMANDS = ("set_rtt", "push_request_errors")


def control_commands(broker: BrokerHandle) -> tuple[str, ...]:
    """The control commands ``broker`` answers."""
    if isinstance(broker, EmbeddedKafka):
        return _COMMON_COMMANDS + _EMBEDDED_COMMANDS
    return _COMMON_COMMANDS


def execute_control_line(broker: BrokerHandle, line: str) -> str:
    """Run one control command and return the reply line: ``ok`` or ``error <message>``."""
    words = line.split()
    if not words:
        return "error empty command"
    command, raw_args = words[0], words[1:]
    accepted = control_commands(broker)
    if command not in accepted:
        return f"error unknown command {command!r}; accepted: {', '.join(accepted)}"
    try:
        if command == "create_topic":
            if not raw_args:
                return "error create_topic needs NAME PARTITIONS [REPLICATION]"
            name, *numbers = raw_args
            broker.create_topic(name, *(int(n) for n in numbers))
        elif command == "push_request_errors":
            api_key, *codes = (int(n) for n in raw_args)
            getattr(broker, command)(api_key, codes)
        else:
            getattr(broker, command)(*(int(n) for n in raw_args))
    except (ValueError, TypeError, EmbeddedKafkaError) as exc:
        return f"error {exc}"
    return "ok"


def parse_topic_spec(spec: str) -> tuple[str, int]:
    """Parse ``NAME:PARTITIONS`` as given to ``--topic``; ValueError names what is wrong."""
    name, sep, count = spec.rpartition(":")
    if not sep or not _PARTITIONS.fullmatch(count) or not 1 <= int(count) <= MAX_PARTITIONS:
        raise ValueError(
            f"--topic must look like NAME:PARTITIONS with PARTITIONS in [1, {MAX_PARTITIONS}], "
            f"got {spec[:80]!r}"
        )
    if not is_topic_name(name):
        raise ValueError(f"--topic NAME must be {TOPIC_NAME_RULE}, got {name[:80]!r}")
    return name, int(count)


def parse_topics(specs: Sequence[str]) -> list[tuple[str, int]]:
    """Parse every ``--topic``; a name given twice is an error."""
    topics = [parse_topic_spec(spec) for spec in specs]
    names = [name for name, _ in topics]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"--topic {name!r} is given more than once")
    return topics


def _check_bootstrap_file(path: Path | None) -> None:
    if path is None:
        return
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"--bootstrap-file: directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"--bootstrap-file: directory {str(parent)!r} is not writable")
    if path.is_dir():
        raise ValueError(f"--bootstrap-file: {str(path)!r} is a directory")


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _serve_control(broker: BrokerHandle, stop: threading.Event) -> None:
    """Answer control commands read from stdin, one reply line per command, until EOF."""
    for line in sys.stdin:
        print(execute_control_line(broker, line), flush=True)
    stop.set()


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``kafka-autoscaler-broker``."""
    parser = argparse.ArgumentParser(
        prog="kafka-autoscaler-broker",
        description=(
            "Run a local Kafka cluster in the foreground and print its bootstrap string on "
            "stdout. Stops on SIGINT/SIGTERM (or at the end of stdin with --control)."
        ),
    )
    parser.add_argument(
        "--kind",
        choices=sorted(_BROKER_LIMITS),
        default="embedded",
        help=(
            "embedded: librdkafka's mock cluster, in memory (default); apache: Apache Kafka "
            "KRaft nodes from the locked jars, needs Java 17+"
        ),
    )
    parser.add_argument(
        "--brokers",
        type=int,
        default=None,
        help=f"broker count: embedded 1-64 (default 3), apache 1-{MAX_NODES} (default 1)",
    )
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME:PARTITIONS",
        help=f"create a topic at start, PARTITIONS in [1, {MAX_PARTITIONS}] (repeatable)",
    )
    parser.add_argument(
        "--bootstrap-file",
        type=Path,
        help="also write the bootstrap string to this file (atomically) once ready",
    )
    parser.add_argument(
        "--broker-assignor",
        action="store_true",
        help="with --kind apache: load our broker-side assignors (group.consumer.assignors "
        "autoscaler for KIP-848 groups, the share-group one) and create the topics they read "
        "the sidecar's plans and loads from, so --group-protocol consumer and --group-type "
        "share can be tried locally",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="read control commands from stdin (create_topic, broker_down, ...); stop at EOF",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the broker in the foreground until SIGINT/SIGTERM (or EOF with ``--control``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    low, high = _BROKER_LIMITS[args.kind]
    brokers = args.brokers if args.brokers is not None else (3 if args.kind == "embedded" else 1)
    try:
        if not low <= brokers <= high:
            raise ValueError(f"--brokers must be in [{low}, {high}] for --kind {args.kind}")
        if args.broker_assignor and args.kind != "apache":
            raise ValueError(
                "--broker-assignor needs --kind apache (the embedded broker has no "
                "broker-side assignors)"
            )
        topics = parse_topics(args.topic)
        _check_bootstrap_file(args.bootstrap_file)
    except ValueError as exc:
        parser.error(str(exc))
    broker: BrokerHandle = (
        EmbeddedKafka(brokers=brokers)
        if args.kind == "embedded"
        else ApacheKafka(brokers, broker_assignor=args.broker_assignor)
    )
    # A signal while nodes start interrupts the start, which stops what it started.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    try:
        broker.start()
    except KeyboardInterrupt:
        return 0
    except EmbeddedKafkaError as exc:
        print(f"kafka-autoscaler-broker: cannot start {args.kind} Kafka: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        if isinstance(broker, ApacheKafka):
            print(
                f"Apache Kafka {broker.version}: {brokers} node(s) ready in "
                f"{broker.startup_seconds:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        if args.broker_assignor:
            # The share assignor reads it; each group's plans topic is its sidecar's to make.
            broker.create_topic(SHARE_LOADS_TOPIC, 1, min(3, brokers))
        for name, partitions in topics:
            broker.create_topic(name, partitions, min(3, brokers))
        if args.bootstrap_file is not None:
            _write_atomically(args.bootstrap_file, broker.bootstrap_servers + "\n")
        # Printed last: a reader of stdout may rely on the file existing by then.
        print(broker.bootstrap_servers, flush=True)
        if args.control:
            threading.Thread(target=_serve_control, args=(broker, stop), daemon=True).start()
        stop.wait()
    except EmbeddedKafkaError as exc:
        print(f"kafka-autoscaler-broker: {exc}", file=sys.stderr)
        return 1
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
