"""Pay the record path's first-use costs before the member joins its group.

The first ``pyarrow.array`` call of a process makes pyarrow import pandas (where it is
installed) to look for pandas inputs; the first decode loads the native decoder and imports
aiokafka's record modules. On a busy machine that took 2-4 s, and it happened inside
aiokafka's fetcher, on the consumer's event loop, after the member had joined: heartbeats
waited as long and the coordinator evicted a live member (found by the loop watch's stack
samples). So the consumer runs one tiny batch through the same code in a worker thread
first, while the loop has no group to keep.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from consumer_sdk.kafka_client.record_batches import BatchRecord, build_batch
from consumer_sdk.records.pending_columns import PendingColumns
from consumer_sdk.records.record_columns import decode_records
from consumer_sdk.sink import Record, RecordsView, records_table

_TOPIC = "warm-up"


def sample_batch() -> bytes:
    """A v2 record batch of two records (a null key, a header): what a fetch brings."""
    records = [BatchRecord(0, 0, b"k", b"v"), BatchRecord(1, 0, None, b"v", [("h", b"x")])]
    return bytes(build_batch(records))


def warm_record_path(columnar: bool) -> int:
    """Decode, hold, take and tabulate one tiny batch the way the consumer will; return the
    records it saw (two). Blocking: call it from a worker thread before joining."""
    if not columnar:
        records = [Record(_TOPIC, 0, offset, 0, b"k", b"v") for offset in (0, 1)]
        return len(RecordsView(_TOPIC, records_table(records)))
    tp = KafkaTopicPartition(_TOPIC, 0)
    pending = PendingColumns[KafkaTopicPartition]()
    pending.add(tp, [decode_records(_TOPIC, 0, sample_batch(), 0)])
    table = pending.take(limit=1 << 20).records[tp]
    partition = pa.array(np.zeros(len(table), np.int32))  # pyarrow's pandas shim, once
    return len(list(RecordsView(_TOPIC, table.append_column("partition", partition))))
