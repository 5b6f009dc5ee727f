"""Kafka's wire protocol below the sidecar and the SDK: the requests aiokafka does not ship
(on its protocol classes), sending them through a client's connections, refreshing its
metadata, probing a server. With :mod:`consumer_sdk.kafka_client` (the consumer's fetcher and
group coordinator) and :mod:`assignor.plugin` (aiokafka's assignor interface) the only code
that touches aiokafka's internals (``tests/test_layers.py`` holds everything else to its
public API; the pin ``aiokafka<0.15`` and ``tests/test_aiokafka_pin.py`` check the internals
used here)."""
