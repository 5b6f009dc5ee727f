"""Share-group (KIP-932) members: confluent-kafka's share consumer writing to a sink, each
record once when the sink's writes are idempotent."""

from consumer_sdk.share.member import IdempotentSink, ShareMember

__all__ = ["IdempotentSink", "ShareMember"]
