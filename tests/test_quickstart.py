"""The getting-started example (examples/delta_quickstart.py), run as a newcomer would: a
script of their own draining a topic into a Delta table, read back by delta-rs, every
record exactly once, and a clean exit on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.support.lake_readers import key_counts
from consumer_sdk.lake.spark_config import SparkSinkConfig
from tests.kafka_helpers import produce_numbered
from tests.sdk_helpers import wait_until

EXAMPLE = Path(__file__).parent.parent / "examples" / "delta_quickstart.py"
RECORDS = 600
PARTITIONS = 3


def test_example_is_short_enough_to_copy() -> None:
    assert len(EXAMPLE.read_text().splitlines()) <= 20


def test_quickstart_lands_every_record_once(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(PARTITIONS)
    produce_numbered(kafka, topic, RECORDS, PARTITIONS)
    env = {
        **os.environ,
        "BOOTSTRAP": kafka,
        "TOPIC": topic,
        "LAKE": str(tmp_path),
        "AUTOSCALER_WAIT_TIME_SECS": "0.5",
        "AUTOSCALER_LEADER_DELAY_SECS": "0.1",  # the embedded broker's (ignored elsewhere)
    }
    process = subprocess.Popen([sys.executable, str(EXAMPLE)], env=env)
    config = SparkSinkConfig(warehouse=str(tmp_path))
    try:
        landed = wait_until(
            lambda: sum(key_counts(config, config.table_for(topic)).values()) >= RECORDS, 240.0
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    counts = key_counts(config, config.table_for(topic))
    assert landed
    assert len(counts) == RECORDS
    assert set(counts.values()) == {1}
    assert {partition for partition, _ in counts} == set(range(PARTITIONS))
