"""The broker-side assignor's jar, built here against the locked Kafka jars, and the broker
properties that enable it.

``python -m local_kafka.broker_assignor`` builds the jar (once per source) and prints its path:
copy it into a broker's ``libs/`` and set the properties :func:`broker_properties` lists.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from assignor.broker import (
    ASSIGNOR_CLASS,
    BOOTSTRAP_PROPERTY,
    CLIENT_PROPERTY_PREFIX,
    SHARE_ASSIGNOR_CLASS,
    SHARE_TOPIC_PROPERTY,
    TOPIC_PROPERTY,
)
from consumer_sdk.lake.jar_lock import JarLockError, ensure_jars, read_lock
from consumer_sdk.lake.java_build import build_jar, packaged_java_sources, print_built_jar
from contract.broker_plans import PLANS_TOPIC
from contract.settings import ConfigError
from contract.share_loads import SHARE_LOADS_TOPIC
from local_kafka.kafka_jars import KAFKA_LOCK

JAR_NAME = "kafka-autoscaler-broker-assignor"
# The broker's jars the classes compile against; a broker of any Kafka 4.x ships them.
_COMPILE_AGAINST = (
    "kafka-group-coordinator-",  # the API, and Kafka's simple share assignor (the fallback)
    "kafka-clients-",
    "jackson-databind-",
    "jackson-core-",
    "jackson-annotations-",
    "slf4j-api-",
)


def ensure_broker_assignor_jar(kafka_jars: Sequence[Path] | None = None) -> Path:
    """The assignor's jar, compiled first if the cache lacks it."""
    if kafka_jars is None:
        try:
            kafka_jars = ensure_jars(read_lock(KAFKA_LOCK))
        except JarLockError as exc:
            raise ConfigError(f"broker assignor: Kafka jars unavailable: {exc}") from None
    classpath = [
        str(jar) for jar in kafka_jars if any(jar.name.startswith(p) for p in _COMPILE_AGAINST)
    ]
    sources = packaged_java_sources("assignor.broker")
    return build_jar(JAR_NAME, sources, classpath, what="broker assignor")


def broker_properties(
    plans_bootstrap: str,
    *,
    topic: str = PLANS_TOPIC,
    share_topic: str = SHARE_LOADS_TOPIC,
    client: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A broker's properties enabling both assignors: the KIP-848 one beside Kafka's own
    (``uniform`` stays the default of every group that does not ask for ``autoscaler``), and the
    share-group one (a broker takes one: share groups without published loads get Kafka's
    ``simple`` assignment from it). ``client``: the reader's own client properties (security,
    for example), given to the brokers under ``autoscaler.plans.client.``."""
    return {
        "group.consumer.assignors": f"uniform,range,{ASSIGNOR_CLASS}",
        "group.share.assignors": SHARE_ASSIGNOR_CLASS,
        BOOTSTRAP_PROPERTY: plans_bootstrap,
        TOPIC_PROPERTY: topic,
        SHARE_TOPIC_PROPERTY: share_topic,
        **{CLIENT_PROPERTY_PREFIX + key: value for key, value in (client or {}).items()},
    }


def main() -> int:
    """Build the jar (``make jars`` does it) and print its path."""
    return print_built_jar(ensure_broker_assignor_jar)


if __name__ == "__main__":
    sys.exit(main())
