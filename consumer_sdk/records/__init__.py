"""The columnar record path: Kafka's record batches decoded straight into Arrow columns.

:mod:`.record_columns` reads batches (the C decoder in ``native/``, loaded with ctypes),
:mod:`.inflate` inflates compressed ones within a bound, :mod:`.columnar_fetch` makes
aiokafka's fetcher hand over columns, :mod:`.pending` and :mod:`.pending_columns` hold what
was fetched until a batch is cut, and :mod:`.fetch_sizes` / :mod:`.fetch_budget` size the
fetches so the consumer stays within its batches' memory.
"""
