"""The broker-side assignors: for KIP-848 groups (``group.protocol=consumer``) and for KIP-932
share groups.

Its Java sources live under ``java/`` (package ``kafkaautoscaler.broker``) and are compiled
against the brokers' own Kafka jars (``local_kafka.broker_assignor`` builds the jar). Inside a
broker it gives a group's members the partitions of the plan the sidecar published for exactly
these members (``contract.broker_plans`` is the record format), and a sticky even spread when no
fresh plan names them. The packing policy itself stays in Python (:mod:`assignor.repair`): the
broker only follows plans, so both sides cannot drift apart.
"""

from __future__ import annotations

# The assignor's name() (what consumers set as group.remote.assignor) and its class (what
# brokers list in group.consumer.assignors).
ASSIGNOR_NAME = "autoscaler"
ASSIGNOR_CLASS = "kafkaautoscaler.broker.AutoscalerAssignor"
# The broker properties it reads.
BOOTSTRAP_PROPERTY = "autoscaler.plans.bootstrap.servers"
TOPIC_PROPERTY = "autoscaler.plans.topic"
MAX_AGE_PROPERTY = "autoscaler.plans.max.age.ms"
CLIENT_PROPERTY_PREFIX = "autoscaler.plans.client."
# Members whose group.instance.id starts so get no partitions (the sidecar's own members).
CONTROL_INSTANCE_PREFIX = "autoscaler-control"
# The share-group assignor: its class (what brokers set as group.share.assignors) and the
# broker property naming the topic of loads it reads (beside the shared ones above).
SHARE_ASSIGNOR_NAME = "autoscaler-share"
SHARE_ASSIGNOR_CLASS = "kafkaautoscaler.broker.ShareAssignor"
SHARE_TOPIC_PROPERTY = "autoscaler.share.loads.topic"
