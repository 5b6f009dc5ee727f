"""Drains a Kafka topic into a Delta Lake table, exactly once (see docs/getting-started.md)."""

import os

from consumer_sdk import AutoscalingConsumer, ConsumerConfig, SparkSinkConfig, SparkTableSink

topic = os.environ.get("TOPIC", "orders")
config = ConsumerConfig.from_env(  # what is not given here comes from AUTOSCALER_* variables
    bootstrap_servers=os.environ.get("BOOTSTRAP", "127.0.0.1:9092"),
    group=f"{topic}-to-delta",
    topics=(topic,),
    capacity=5000.0,  # records/s one consumer drains ("auto": the sidecar measures it)
)
sink = SparkTableSink(SparkSinkConfig(warehouse=os.environ.get("LAKE", "/tmp/lake")))
AutoscalingConsumer(config, sink).run()  # until SIGTERM: flush, commit, leave the group
