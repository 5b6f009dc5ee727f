"""The secured Apache Kafka leg (local_kafka.secured): SASL_SSL with SCRAM-SHA-512, mutual
TLS, and an authorizer whose ACLs let only the sidecar write the speeds topic. The sidecar's
clients and SDK consumers connect with the shared security settings (contract.security)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.errors import KafkaError, TopicAuthorizationFailedError
from confluent_kafka import Consumer, TopicPartition

from consumer_sdk.config import ConsumerConfig
from consumer_sdk.sink import CallbackSink
from contract.snapshot import speeds_topic
from local_kafka.apache_kafka import ApacheKafka
from local_kafka.clusters import ClusterKind
from local_kafka.secured import Certificates, KeyPair, SecuredListeners
from sidecar.config import SidecarConfig
from sidecar.monitor import Monitor
from sidecar.publisher import SnapshotPublisher
from tests.conftest import skip_unless_runnable
from tests.kafka_helpers import produce_numbered
from tests.sdk_helpers import FAST_GROUP, SeenRecords, ThreadedMember, wait_until

PASSWORDS = {"sidecar": "sidecar-secret", "consumer": "consumer-secret"}
GROUP = "g-secured"
RECORDS = 300


class Leg:
    """The running secured cluster and what its clients need."""

    def __init__(self, kafka: ApacheKafka, certificates: Certificates, topic: str) -> None:
        self.kafka, self.certificates, self.topic = kafka, certificates, topic
        self.speeds = speeds_topic(GROUP)

    def settings(self, bootstrap_servers: str) -> dict[str, Any]:
        """The group's settings on one of the secured listeners."""
        return {
            "bootstrap_servers": bootstrap_servers,
            "group": GROUP,
            "topics": (self.topic,),
            "capacity": 100.0,
            "ssl_cafile": str(self.certificates.ca.certificate),
        }

    def scram(self, user: str, password: str | None = None) -> dict[str, Any]:
        """Shared settings of ``user`` on the SASL_SSL listener."""
        return {
            **self.settings(self.kafka.sasl_bootstrap_servers),
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": user,
            "sasl_plain_password": PASSWORDS[user] if password is None else password,
        }

    def mutual_tls(self, pair: KeyPair) -> dict[str, Any]:
        """Shared settings of the holder of ``pair`` on the mutual-TLS listener."""
        return {
            **self.settings(self.kafka.mtls_bootstrap_servers),
            "security_protocol": "SSL",
            "ssl_certfile": str(pair.certificate),
            "ssl_keyfile": str(pair.key),
        }

    def sidecar(self) -> SidecarConfig:
        return SidecarConfig(**self.scram("sidecar"), scaler="none")

    def monitor(self) -> Monitor:
        """The sidecar's offset reader, authenticated as the sidecar."""
        sidecar = self.sidecar()
        return Monitor(
            sidecar.bootstrap_servers,
            GROUP,
            [self.topic],
            min_span_s=0.1,
            client_options=sidecar.kafka_client_options(),
        )


@pytest.fixture(scope="module")
def leg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Leg]:
    skip_unless_runnable(ClusterKind.APACHE)
    certificates = Certificates.make(tmp_path_factory.mktemp("tls"), clients=["consumer"])
    secured = SecuredListeners(certificates, PASSWORDS)
    with ApacheKafka(secured=secured) as kafka:
        topic = "data-secured"
        kafka.create_topic(topic, 3)
        admin = kafka._admin_client()
        speeds = speeds_topic(GROUP)
        # The consumers read the data and the speeds, in their group; only the sidecar
        # writes the speeds topic (and may create it) and reads every group's offsets.
        SecuredListeners.allow(
            admin,
            "consumer",
            topics=[("data-*", "read"), ("data-*", "describe"), (speeds, "read")],
            groups=[(f"{GROUP}*", "read")],
        )
        SecuredListeners.allow(
            admin,
            "sidecar",
            topics=[
                ("data-*", "describe"),
                (speeds, "write"),
                (speeds, "create"),
                (speeds, "describe"),
            ],
            groups=[(GROUP, "describe")],
            cluster=["describe"],
        )
        produce_numbered(kafka.bootstrap_servers, topic, RECORDS, 3)
        yield Leg(kafka, certificates, topic)


def consumer_config(settings: dict[str, Any], identity: str) -> ConsumerConfig:
    values: dict[str, Any] = {**settings, **FAST_GROUP, "member_identity": identity}
    return ConsumerConfig(**values)


def consume_all(config: ConsumerConfig) -> SeenRecords:
    """Run one SDK consumer until it wrote every record, then stop it."""
    seen = SeenRecords()
    member = ThreadedMember(config, CallbackSink(seen.write)).start()
    try:
        wait_until(lambda: seen.total() >= RECORDS, 60)
    finally:
        member.stop()
    return seen


def test_the_sidecar_and_a_consumer_work_over_sasl_ssl_scram(leg: Leg) -> None:
    sidecar = leg.sidecar()
    consumer = consumer_config(leg.scram("consumer"), "scram-0")

    async def measure_and_publish() -> float:
        monitor = leg.monitor()
        publisher = SnapshotPublisher(
            sidecar.bootstrap_servers, sidecar.snapshot_topic, sidecar.kafka_client_options()
        )
        await monitor.start()
        await publisher.start()
        try:
            reading = await monitor.poll()
            await asyncio.sleep(0.2)
            reading = await monitor.poll()
            await publisher.publish(monitor.snapshot(reading))
            return sum(monitor.lags(reading).values())
        finally:
            await publisher.stop()
            await monitor.stop()

    lag_before = asyncio.run(measure_and_publish())
    seen = consume_all(consumer)
    lag_after = asyncio.run(measure_and_publish())
    assert seen.total() == RECORDS and seen.duplicates() == 0
    assert lag_before == RECORDS  # the sidecar read the group's offsets through SCRAM
    assert lag_after == 0  # the consumer committed through SCRAM too


def speeds_records(leg: Leg) -> int:
    """How many snapshots the speeds topic holds (read by the harness, PLAINTEXT)."""
    reader = Consumer(
        {
            "bootstrap.servers": leg.kafka.bootstrap_servers,
            "group.id": "harness-count",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        low, high = reader.get_watermark_offsets(TopicPartition(leg.speeds, 0), timeout=10)
        return int(high - low)
    finally:
        reader.close()


def test_a_consumer_principal_cannot_write_the_speeds_topic(leg: Leg) -> None:
    sidecar = leg.sidecar()
    consumer = consumer_config(leg.scram("consumer"), "forger")

    async def publish_as(options: dict[str, Any]) -> None:
        publisher = SnapshotPublisher(consumer.bootstrap_servers, leg.speeds, options)
        await publisher.start()
        try:
            monitor = leg.monitor()
            await monitor.start()
            try:
                snapshot = monitor.snapshot(await monitor.poll())
            finally:
                await monitor.stop()
            await publisher.publish(snapshot)
        finally:
            await publisher.stop()

    asyncio.run(publish_as(sidecar.kafka_client_options()))  # the sidecar may
    before = speeds_records(leg)
    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(publish_as(consumer.kafka_client_options()))
    assert speeds_records(leg) == before  # nothing forged landed


def test_a_consumer_reads_over_mutual_tls(leg: Leg) -> None:
    pair = leg.certificates.clients["consumer"]
    # A group of its own: the SCRAM test's group committed every record already.
    config = consumer_config({**leg.mutual_tls(pair), "group": f"{GROUP}-mtls"}, "mtls-0")
    seen = consume_all(config)
    assert seen.total() == RECORDS


@pytest.mark.parametrize("fault", ["wrong password", "untrusted certificate"])
def test_refused_credentials_fail_without_reading(
    leg: Leg, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    if fault == "wrong password":
        settings = leg.scram("consumer", password="not-the-password")
    else:
        settings = leg.mutual_tls(leg.certificates.client("consumer", untrusted=True))
    config = consumer_config(settings, "refused")

    async def connect() -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(
            bootstrap_servers=config.bootstrap_servers,
            request_timeout_ms=5000,
            **config.client_options(),
        )
        try:
            await admin.start()
        finally:
            await admin.close()

    with pytest.raises(KafkaError):
        asyncio.run(connect())
    # The broker said why (the client's error itself only says it could not bootstrap): a
    # SCRAM refusal, or a TLS handshake the broker closed on the untrusted certificate.
    reason = {"wrong password": "invalid credentials", "untrusted certificate": "closed"}
    assert any(reason[fault] in r.getMessage() for r in caplog.records if r.name == "aiokafka")
