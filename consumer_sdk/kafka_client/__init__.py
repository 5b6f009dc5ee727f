"""The SDK consumer's aiokafka client: the fetcher handing over columns
(:mod:`.columnar_fetch`) within a byte budget (:mod:`.fetch_budget`), the group coordinator's
cooperative join steps (:mod:`.cooperative`) and what the stages read of the membership
(:mod:`.group`), record batches built and read with aiokafka's classes
(:mod:`.record_batches`), and Kafka's property names (:mod:`.properties`). With
:mod:`contract.kafka_client` (the wire protocol) and :mod:`assignor.plugin` the only code
that touches aiokafka's internals (``tests/test_layers.py``)."""
