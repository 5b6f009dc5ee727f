"""The columnar record path: Kafka's record batches decoded straight into Arrow columns.

:mod:`.record_columns` reads batches (the C decoder in ``native/``, loaded with ctypes),
:mod:`.inflate` inflates compressed ones within a bound, :mod:`.pending` and
:mod:`.pending_columns` hold what was fetched until a batch is cut, and :mod:`.fetch_sizes`
sizes the fetches so the consumer stays within its batches' memory.
:mod:`consumer_sdk.kafka_client` hands this path aiokafka's fetched bytes.
"""
