"""The consumer's pipeline, one stage per module, wired by :mod:`consumer_sdk.consumer`:

fetch (:mod:`.fetch`: the client's records into the pending buffer until a batch is full)
-> write (:mod:`.write`: a batch per topic into the sink, in order, some in flight)
-> commit (:mod:`.commit`: the batch's offsets to Kafka once the sink has it).

:mod:`.resume` holds newly assigned partitions until the sink says where each resumes.
Each stage is driven through small interfaces (a client, a sink), so it is tested alone
with fakes as well as through the consumer on both Kafka legs.
"""
