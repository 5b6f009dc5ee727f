"""Where the pinned Apache Kafka jars are listed: the lock the nodes and our broker-side
assignor's build both read (``consumer_sdk.lake.jar_lock`` fetches and checks them)."""

from __future__ import annotations

from pathlib import Path

KAFKA_LOCK = Path(__file__).resolve().parent / "locks" / "apache-kafka.lock"
