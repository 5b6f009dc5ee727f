"""The drop-in consumer and its sinks.

What applications import, from the package itself::

    from consumer_sdk import AutoscalingConsumer, CallbackSink, ConsumerConfig, SparkTableSink

The rooms below it: :mod:`consumer_sdk.pipeline` (fetch, write, commit stages),
:mod:`consumer_sdk.records` (Kafka's record batches decoded into Arrow columns, fetch
sizing) and :mod:`consumer_sdk.lake` (the Spark table sink: Delta Lake, Iceberg, parquet).
Names are imported on first use, so ``import consumer_sdk`` loads neither Spark nor Arrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from consumer_sdk.config import ConsumerConfig
    from consumer_sdk.consumer import AutoscalingConsumer
    from consumer_sdk.lake.spark_config import SparkSinkConfig
    from consumer_sdk.lake.spark_sink import SparkTableSink
    from consumer_sdk.lake.spark_tables import register_tables
    from consumer_sdk.sink import CallbackSink, Record, Sink

_HOMES = {
    "AutoscalingConsumer": "consumer_sdk.consumer",
    "ConsumerConfig": "consumer_sdk.config",
    "CallbackSink": "consumer_sdk.sink",
    "Record": "consumer_sdk.sink",
    "Sink": "consumer_sdk.sink",
    "SparkSinkConfig": "consumer_sdk.lake.spark_config",
    "SparkTableSink": "consumer_sdk.lake.spark_sink",
    "register_tables": "consumer_sdk.lake.spark_tables",
}
__all__ = [
    "AutoscalingConsumer",
    "CallbackSink",
    "ConsumerConfig",
    "Record",
    "Sink",
    "SparkSinkConfig",
    "SparkTableSink",
    "register_tables",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'consumer_sdk' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
