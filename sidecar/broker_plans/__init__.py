"""The sidecar's side of KIP-848 groups (``--group-protocol consumer``): the broker assigns,
so the sidecar plans for it. Each round it describes the group, packs the partitions for the
members it wants (:mod:`.planning`, pure), publishes the plan for our broker-side assignor
(:mod:`contract.broker_plans`), makes the coordinator assign when nothing else would (a control
member joining, :mod:`.control`), and removes a member only once the plan has emptied it
(:mod:`.scaler`)."""
