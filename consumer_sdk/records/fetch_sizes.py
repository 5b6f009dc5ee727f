"""How much the Kafka client asks of each partition and may hold fetched ahead.

Pure sizes; :mod:`consumer_sdk.kafka_client.fetch_budget` applies them to aiokafka's fetcher.

A broker returns a partition's first record batch whole only for the first non-empty
partition of a response; for every other partition it returns what fits in the
per-partition ask, nothing usable when the next batch is larger. An ask smaller than the
producers' record batches (librdkafka's reach 1 MB) therefore brings little more than one
batch per response: measured on Apache Kafka with 1 MB producer batches, 256 KiB asks over
64 partitions gave 1 MB responses carrying 3-4 partitions, 1 MiB asks 16 MiB responses of
16. So each partition is asked for Kafka's default 1 MiB, and what the client holds ahead is
bounded by a byte budget instead, whatever the partition count.

The budget and a response are a quarter batch (at least 1 MiB): the client holds about one
response ahead while the consumer decodes the last. Measured side by side (Apache Kafka, SDK
-> Delta, 16 MiB batches): 4 MiB responses ran as fast as 16 MiB ones or faster, with 1.3 s
of Python CPU per 250 MiB at 200 B against 1.4-1.6 s, and a budget of a quarter batch as fast
as a half or a whole one. Each response is held about three times while it is decoded (the
socket's buffer, the client's per-partition copies, the columns), so 16 MiB responses and a
whole batch ahead cost a consumer behind a slow sink 25-30 MiB more.
"""

from __future__ import annotations

from consumer_sdk.config import MIB

KIB = 1024
# Kafka's default max.partition.fetch.bytes; a topic's default max.message.bytes (1 MiB +
# 12 bytes) is one batch that fits, larger ones still come whole when first in a response.
PARTITION_FETCH_BYTES = MIB
# Below this a fetch returns too little per round trip.
MIN_FETCH_BYTES = 64 * KIB

# What the client may hold fetched ahead of the batch being built, in batches.
FETCH_AHEAD_BATCHES = 0.25
# Whether the fetch ahead stops once the batch being built is full (fetch_ahead_room); the
# benchmarks turn it off to compare with a budget that stays whole.
FETCH_WITHIN_BATCH = True
# How many times a response is in memory at once while it is decoded: the bytes asyncio
# read, aiokafka's copy of each partition's records, and the decoded columns (measured with
# tracemalloc; README, "Memory").
RESPONSE_COPIES = 3


def fetch_ahead_bytes(batch_bytes: int) -> int:
    """Bytes of fetched, not yet taken records the client may hold: ``FETCH_AHEAD_BATCHES``
    batches, at least 1 MiB."""
    return max(MIB, int(batch_bytes * FETCH_AHEAD_BATCHES))


def fetch_ahead_room(batch_bytes: int, pending_bytes: int, free_slots: int = 0) -> int:
    """The fetch-ahead budget while ``pending_bytes`` of the next batch are held and
    ``free_slots`` write slots are free: the fetch ahead, but no more than keeps the
    consumer within its (writes in flight + 1) batches.

    Each write in flight holds at most a batch, so the batch being built and the
    ``free_slots`` batches the sink could hold and does not, less ``pending_bytes``, is the
    room the fetch ahead may fill. A response is held ``RESPONSE_COPIES`` times while it is
    decoded, and may bring one whole producer batch (up to ``PARTITION_FETCH_BYTES``) more
    than it asked for, so the budget is a third of the room less three such batches. While
    every slot is taken and that leaves nothing, the client fetches nothing until a write
    ends. With a slot free and a batch too small for the reserve (a producer batch is larger
    than the room), a third of the room: a consumer must go on reading, and the broker
    sends a producer batch whole whatever it is asked."""
    ahead = fetch_ahead_bytes(batch_bytes)
    if not FETCH_WITHIN_BATCH:
        return ahead
    room = (1 + max(0, free_slots)) * batch_bytes - pending_bytes
    strict = room - RESPONSE_COPIES * PARTITION_FETCH_BYTES
    if strict >= RESPONSE_COPIES * MIN_FETCH_BYTES or free_slots <= 0:
        room = strict
    return max(0, min(ahead, room // RESPONSE_COPIES))


def fetch_max_bytes(batch_bytes: int) -> int:
    """Bytes one fetch response may hold: the whole fetch-ahead budget."""
    return fetch_ahead_bytes(batch_bytes)


def fetch_room(budget: int, held: int, response_max: int, requests: int = 1) -> int | None:
    """Bytes each of ``requests`` fetch responses (one per broker) may hold when ``held``
    bytes are fetched and not taken or asked of responses still in flight: an equal share of
    what is left of ``budget`` (at least ``MIN_FETCH_BYTES``), at most ``response_max``;
    None while the budget is spent (no fetch until the consumer takes records). A response
    may exceed its size by one record batch (the broker returns a first batch whole), so the
    client holds at most ``budget`` + (``MIN_FETCH_BYTES`` + one batch) per broker."""
    if held >= budget:
        return None
    return min(response_max, max(MIN_FETCH_BYTES, (budget - held) // max(1, requests)))
