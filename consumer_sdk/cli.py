"""``kafka-autoscaler-consumer``: run one SDK consumer with its config from the environment.

The sidecar's local scaler starts these (one per replica, each with its own
``AUTOSCALER_MEMBER_IDENTITY``). Sinks: ``spark`` (Spark tables, configured by
``AUTOSCALER_SPARK_*``; ``spark:WAREHOUSE`` sets the warehouse), ``null`` (discard), or
``jsonl:PATH`` (append one JSON line per record: topic, partition, offset, key, value as text;
``{identity}`` in PATH becomes the member identity). With ``AUTOSCALER_GROUP_TYPE=share`` it
is a share-group member (:mod:`consumer_sdk.share`), writing each record once with the spark
sink.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from consumer_sdk.allocator import give_back_every, pin_mmap_threshold
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.consumer import AutoscalingConsumer
from consumer_sdk.share import ShareMember
from consumer_sdk.sink import CallbackSink, Record, Sink
from consumer_sdk.stopping import run_until_signalled
from contract.extras import missing_extra_line, missing_modules
from contract.lifeline import (
    IDENTITY_FIELD,
    IDENTITY_LOCK_ENV,
    PARENT_ENV,
    die_with_parent,
    hold_identity_lock,
)
from contract.quiet_logs import quiet_repeats
from contract.settings import ConfigError

log = logging.getLogger(__name__)

# What the Spark table sink imports from the 'spark' extra.
SPARK_MODULES = ("pyspark", "deltalake", "pyiceberg", "pandas")
# What a share-group member imports from the 'share' extra.
SHARE_MODULES = ("confluent_kafka",)


# What kafka-autoscaler-consumer's --sink (AUTOSCALER_SINK) takes: its --help and the
# configuration reference (kafka_autoscaler.reference_pages).
SINK_HELP = (
    "spark (Spark tables, AUTOSCALER_SPARK_*), spark:WAREHOUSE, jsonl:PATH ({identity} "
    "becomes the member identity), or null, which DISCARDS every record and commits it "
    "(for tests and benchmarks)"
)


NULL_WARNING_EVERY_S = 60.0


class DiscardedRecords:
    """``--sink null``: every record is dropped and its offset committed. Asked for on
    purpose (there is no default sink), and said every minute with the count so far, so a
    deployment left on it is noticed before the records are needed."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.discarded = 0
        self._said_at: float | None = None

    def write(self, _topic: str, records: Sequence[Record]) -> None:
        """Count ``records`` as discarded; warn when a minute has passed since the last."""
        self.discarded += len(records)
        now = self.clock()
        if self._said_at is None or now - self._said_at >= NULL_WARNING_EVERY_S:
            self._said_at = now
            log.warning(
                "--sink null discards every record it reads and commits its offset: %d "
                "discarded so far (AUTOSCALER_SINK=spark writes them to tables)",
                self.discarded,
            )


def jsonl_sink(path: Path) -> Sink:
    """Append records as JSON lines, fsynced before the write returns (then committed)."""
    handle = path.open("a")

    def write(_topic: str, records: Sequence[Record]) -> None:
        handle.write(
            "".join(
                json.dumps(
                    {
                        "topic": r.topic,
                        "partition": r.partition,
                        "offset": r.offset,
                        "key": (r.key or b"").decode("utf-8", "replace"),
                        "value": (r.value or b"").decode("utf-8", "replace"),
                    }
                )
                + "\n"
                for r in records
            )
        )
        handle.flush()
        os.fsync(handle.fileno())

    return CallbackSink(write)


def parse_sink(spec: str, identity: str = "") -> Sink:
    """``spark[:WAREHOUSE]``, ``null`` or ``jsonl:PATH`` (``{identity}`` in PATH becomes the
    member identity)."""
    if spec == "null":
        return CallbackSink(DiscardedRecords().write)
    kind, sep, target = spec.partition(":")
    if kind == "spark":
        if missing := missing_modules(SPARK_MODULES):
            raise ConfigError(missing_extra_line("--sink spark", "spark", missing))
        from consumer_sdk.lake.spark_config import SparkSinkConfig
        from consumer_sdk.lake.spark_sink import SparkTableSink

        if sep and target:
            return SparkTableSink(SparkSinkConfig.from_env(warehouse=target))
        return SparkTableSink(SparkSinkConfig.from_env())
    if kind == "jsonl" and sep and target:
        path = Path(target.replace(IDENTITY_FIELD, identity))
        if not path.parent.is_dir():
            raise ConfigError(
                f"--sink (AUTOSCALER_SINK) jsonl:PATH needs an existing directory, "
                f"{str(path.parent)!r} is not one"
            )
        return jsonl_sink(path)
    raise ConfigError(
        f"--sink (AUTOSCALER_SINK) must be spark, spark:WAREHOUSE, null or jsonl:PATH, got {spec!r}"
    )


def main(
    argv: Sequence[str] | None = None,
    *,
    sink_factory: Callable[[str, str], Sink] = parse_sink,
) -> int:
    """Entry point: configuration from AUTOSCALER_* variables (see the README).
    ``sink_factory`` turns the --sink spec and the member identity into the sink (a
    program embedding this entry point can bring sinks of its own)."""
    parser = argparse.ArgumentParser(
        prog="kafka-autoscaler-consumer",
        description="Run one SDK consumer; its settings come from AUTOSCALER_* variables "
        "(see the README, section 'Consumer SDK').",
    )
    parser.add_argument(
        "--sink",
        default=os.environ.get("AUTOSCALER_SINK"),
        help=f"where records go (AUTOSCALER_SINK): {SINK_HELP}. Required.",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    quiet_repeats()  # one line a minute, not several a second, while a broker is down
    pin_mmap_threshold()  # freed fetch buffers go back to the system (consumer_sdk.allocator)
    parent = os.environ.get(PARENT_ENV, "")
    if parent.isdigit() and not die_with_parent(int(parent)):
        print("kafka-autoscaler-consumer: the sidecar that started it is gone", file=sys.stderr)
        return 0
    try:
        if not args.sink:
            raise ConfigError(
                "--sink (AUTOSCALER_SINK) is required: spark, spark:WAREHOUSE, jsonl:PATH, "
                "or null (discards every record)"
            )
        config = ConsumerConfig.from_env()
        _log_as(config.member_identity)
        consumer = _member(config, sink_factory(args.sink, config.member_identity))
    except (ConfigError, OSError) as exc:
        print(f"kafka-autoscaler-consumer: error: {exc}", file=sys.stderr)
        return 2
    lock_path = os.environ.get(IDENTITY_LOCK_ENV, "")
    lock = hold_identity_lock(Path(lock_path)) if lock_path else None
    if lock_path and lock is None:
        print(
            f"kafka-autoscaler-consumer: error: member identity {config.member_identity} is "
            f"still held by another consumer ({lock_path})",
            file=sys.stderr,
        )
        return 3
    try:
        run_until_signalled(consumer.request_stop, lambda: _run_giving_back(consumer))
    except ConfigError as exc:  # found at start: a table with other columns, a warehouse...
        print(f"kafka-autoscaler-consumer: error: {exc}", file=sys.stderr)
        return 2
    return 0


async def _run_giving_back(member: AutoscalingConsumer | ShareMember) -> None:
    """Run ``member``, giving what the allocators keep after a backlog back every minute."""
    giver = asyncio.create_task(give_back_every())
    try:
        await member.run_async()
    finally:
        giver.cancel()


def _member(config: ConsumerConfig, sink: Sink) -> AutoscalingConsumer | ShareMember:
    """A consumer-group member, or a share-group one (``group_type`` share)."""
    if config.group_type != "share":
        return AutoscalingConsumer(config, sink)
    if missing := missing_modules(SHARE_MODULES):
        raise ConfigError(missing_extra_line("group_type share", "share", missing))
    return ShareMember(config, sink)


def _log_as(identity: str) -> None:
    """Name the member in every log line: the sidecar's local scaler merges its consumers'
    output into its own."""
    formatter = logging.Formatter(f"%(asctime)s [{identity}] %(name)s %(message)s")
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)


if __name__ == "__main__":
    sys.exit(main())
