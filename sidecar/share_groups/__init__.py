"""Share groups (KIP-932): what the sidecar reads of them (the share-partition offsets and lag,
the members) and the partition loads it publishes for the broker's share assignor."""
