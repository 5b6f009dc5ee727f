"""Local Kafka clusters for the tests, the demo and the benchmarks, never imported by the
product: the embedded broker (librdkafka's mock cluster, :mod:`.embedded`, in a process of
its own with :mod:`.embedded_process`), Apache Kafka from its locked jars in KRaft mode
(:mod:`.apache_kafka`), both behind :mod:`.clusters`, and ``kafka-autoscaler-broker``
(:mod:`.broker_cli`)."""
