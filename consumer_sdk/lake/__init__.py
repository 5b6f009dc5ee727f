"""The Spark table sink: Delta Lake, Iceberg and parquet tables, exactly once.

:mod:`.spark_sink` is the sink; :mod:`.lake_writer` writes a batch and its offsets in one
commit; :mod:`.delta` and :mod:`.iceberg` hold each format's files and history;
:mod:`.partition_fence` and the Java classes in ``java/`` (built by :mod:`.commit_checks`)
refuse a commit from a writer that lost its partitions. The jars are pinned in ``locks/``
(:mod:`.jar_lock`). Nothing here imports the consumer: the sink is given batches.
"""
