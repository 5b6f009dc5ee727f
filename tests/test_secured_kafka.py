"""The secured Apache Kafka leg (local_kafka.secured): SASL_SSL with SCRAM-SHA-512, mutual
TLS, and an authorizer whose ACLs let only the sidecar write the speeds and plans topics. The
sidecar's clients and SDK consumers connect with the shared security settings
(contract.security); the brokers' assignor reads the plans over SASL_SSL as a user of its own."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaError, TopicAuthorizationFailedError
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import REGISTRY

from benchmarks.support.rate_writer import RateWriter
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.sink import CallbackSink
from contract.broker_plans import plans_topic_for
from contract.local_ports import free_port
from contract.refusals import Kind, Refusal, refusal
from contract.settings import env_name
from contract.snapshot import speeds_topic
from local_kafka.apache_kafka import ApacheKafka
from local_kafka.clusters import ClusterKind
from local_kafka.secured import (
    ASSIGNOR_USER,
    Certificates,
    KeyPair,
    SecuredListeners,
    grant_group,
    grant_plans,
    scram_environment,
)
from sidecar.config import SidecarConfig
from sidecar.monitor import Monitor
from sidecar.publisher import SnapshotPublisher
from tests.conftest import skip_unless_runnable
from tests.kafka_helpers import produce_numbered
from tests.kip848_helpers import (
    CAPACITY,
    CONSUMER,
    RATES,
    kip848_sidecar,
    member_loads,
    planned_and_held,
    rows,
)
from tests.sdk_helpers import (
    FAST_GROUP,
    SeenRecords,
    ThreadedMember,
    example_consumer_command,
    stop_sidecar_process,
    wait_until,
)
from tests.sdk_helpers import sidecar_status as status

ROOT = Path(__file__).parent.parent

PASSWORDS = {
    "sidecar": "sidecar-secret",
    "consumer": "consumer-secret",
    ASSIGNOR_USER: "assignor-secret",
}
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
    with ApacheKafka(secured=secured, broker_assignor=True) as kafka:
        topic = "data-secured"
        kafka.create_topic(topic, 3)
        # The consumers read the data and the speeds, in their group; only the sidecar
        # writes the speeds topic (and may create it) and reads every group's offsets.
        grant_group(
            kafka.admin_client(), group=GROUP, topics=["data-*"], speeds=speeds_topic(GROUP)
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


def librdkafka_properties(leg: Leg, user: str) -> str:
    """``user``'s librdkafka settings on the SASL_SSL listeners, as properties-file lines."""
    settings = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
        "ssl.ca.location": str(leg.certificates.ca.certificate),
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def secured_kip848_group(
    leg: Leg, tmp_path: Path, prefix: str, consumer_password: str | None = None
) -> tuple[str, Path, str, dict[str, str]]:
    """A topic of len(RATES) partitions with its group's and the plans' ACLs; the output
    folder, the KIP-848 example consumer's command (``consumer_password``: instead of the
    consumer's own) and the sidecar's SCRAM environment. Returns (topic, out, consumer,
    security)."""
    kafka = leg.kafka
    topic = f"{prefix}-{free_port()}"
    group = f"g-{topic}"
    kafka.create_topic(topic, len(RATES), 1)
    admin = kafka.admin_client()
    grant_group(admin, group=group, topics=[topic], speeds=f"speeds-{topic}")
    grant_plans(admin, group=group)
    password = tmp_path / "sidecar.password"
    password.write_text(PASSWORDS["sidecar"] + "\n")
    settings = librdkafka_properties(leg, "consumer")
    if consumer_password is not None:
        settings = settings.replace(PASSWORDS["consumer"], consumer_password)
    properties = tmp_path / "consumer.properties"
    properties.write_text(settings)
    out = tmp_path / "out"
    out.mkdir()
    consumer = example_consumer_command(
        CONSUMER,
        kafka.sasl_bootstrap_servers,
        topic,
        out,
        "--instance-id {identity} --properties-file",
        str(properties),
    )
    security = scram_environment(
        kafka.sasl_bootstrap_servers, leg.certificates, "sidecar", password
    )
    return topic, out, consumer, security


def test_the_sidecar_sizes_a_kip848_group_whose_brokers_read_its_plans_over_sasl_ssl(
    leg: Leg, tmp_path: Path
) -> None:
    kafka = leg.kafka
    topic, out, consumer, security = secured_kip848_group(leg, tmp_path, "data-kip848")
    port = free_port()
    writer = RateWriter(kafka.bootstrap_servers, topic, RATES, b"x" * 50)  # the harness's door
    writer.start()
    sidecar = kip848_sidecar(
        kafka.sasl_bootstrap_servers, topic, consumer, port, tmp_path, max_replicas=4, env=security
    )
    try:
        assert wait_until(lambda: planned_and_held(port), timeout_s=120), status(port)
        page = status(port)
        # Uniform's even split would put more than C on a member: the brokers follow the plan.
        assert all(load <= CAPACITY for load in member_loads(page).values()), page
        assert not page["broker_plans"]["problems"] and page["healthy"], page
        writer.finish()
        delivered = writer.written
        assert wait_until(lambda: delivered <= rows(out), timeout_s=60)  # nothing lost
    finally:
        writer.finish()
        errors = stop_sidecar_process(sidecar)
    assert PASSWORDS["sidecar"] not in errors  # the password never reaches the log
    assert writer.unflushed == 0


def test_consumers_whose_password_is_refused_are_not_multiplied(leg: Leg, tmp_path: Path) -> None:
    """Every member's password is wrong: they run, retry and never join. The sidecar holds
    at the count it first started and names why, in the members' own words."""
    kafka = leg.kafka
    topic, _, consumer, security = secured_kip848_group(
        leg, tmp_path, "data-refused", consumer_password="not-it"
    )
    port = free_port()
    writer = RateWriter(kafka.bootstrap_servers, topic, RATES, b"x" * 50)
    writer.start()
    sidecar = kip848_sidecar(
        kafka.sasl_bootstrap_servers, topic, consumer, port, tmp_path, max_replicas=len(RATES),
        env=security,
    )  # fmt: skip
    try:

        def held() -> dict[str, Any] | None:
            found: dict[str, Any] | None = status(port).get("not_joining")
            return found

        assert wait_until(lambda: held() is not None, timeout_s=240), status(port)
        problem = held()
        assert problem is not None and "authentication" in problem["problem"].lower(), problem
    finally:
        writer.finish()
        errors = stop_sidecar_process(sidecar)
    (first,) = [line for line in errors.splitlines() if " scale_up 0 -> " in line]
    assert " scale_up " not in errors.split(first)[1]  # never a second scale-up


def write_plans_topic(leg: Leg, principal: str, group: str) -> Any:
    """What the brokers answer ``principal``'s write to ``group``'s plans topic: None when
    it was written, else the librdkafka error."""
    from confluent_kafka import KafkaError as LibrdkafkaError
    from confluent_kafka import Producer

    settings = dict(line.split("=", 1) for line in librdkafka_properties(leg, principal).split())
    producer = Producer({**settings, "bootstrap.servers": leg.kafka.sasl_bootstrap_servers})
    answers: list[LibrdkafkaError | None] = []
    producer.produce(
        plans_topic_for(group),
        b"forged",
        key=group.encode(),
        on_delivery=lambda e, _m: answers.append(e),
    )
    assert producer.flush(30) == 0
    assert len(answers) == 1
    return answers[0]


def test_a_consumer_principal_cannot_write_a_plans_topic(leg: Leg) -> None:
    from confluent_kafka import KafkaError as LibrdkafkaError

    refused = write_plans_topic(leg, "consumer", "g-any")
    assert refused is not None
    assert refused.code() == LibrdkafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_sidecar_cannot_publish_a_plan_for_another_group(leg: Leg) -> None:
    """Each group's plans topic is its own: the sidecar principal granted group A's writes
    A's plans topic and is refused B's (the brokers' assignor refuses a plan naming another
    group than its topic's, so B cannot be steered from A's topic either)."""
    from confluent_kafka import KafkaError as LibrdkafkaError

    own, other = f"g-own-{free_port()}", f"g-other-{free_port()}"
    leg.kafka.create_topic(plans_topic_for(own), 1, 1)
    leg.kafka.create_topic(plans_topic_for(other), 1, 1)
    grant_plans(leg.kafka.admin_client(), group=own)
    assert write_plans_topic(leg, "sidecar", own) is None
    refused = write_plans_topic(leg, "sidecar", other)
    assert refused is not None
    assert refused.code() == LibrdkafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_consumer_reads_over_mutual_tls(leg: Leg) -> None:
    pair = leg.certificates.clients["consumer"]
    # A group of its own: the SCRAM test's group committed every record already.
    config = consumer_config({**leg.mutual_tls(pair), "group": f"{GROUP}-mtls"}, "mtls-0")
    seen = consume_all(config)
    assert seen.total() == RECORDS


REFUSALS = {
    # fault: (kind, what the line names)
    "wrong password": (Kind.CREDENTIALS, "sasl_plain_username='consumer'"),
    "mechanism not enabled": (Kind.CREDENTIALS, "sasl_mechanism=SCRAM-SHA-256"),
    "missing CA": (Kind.CERTIFICATE, "ssl_cafile (unset)"),
    "untrusted certificate": (Kind.CERTIFICATE, "not signed by a CA the broker trusts"),
    "expired certificate": (Kind.CERTIFICATE, "it has expired"),
    "no client certificate": (Kind.CERTIFICATE, "set ssl_certfile and ssl_keyfile"),
    "plaintext to a TLS listener": (Kind.PROTOCOL, "security_protocol=PLAINTEXT is probably"),
}


def refused_settings(leg: Leg, fault: str) -> dict[str, Any]:
    """The consumer's settings with ``fault``."""
    certificates = leg.certificates
    if fault == "wrong password":
        return leg.scram("consumer", password="not-the-password")
    if fault == "mechanism not enabled":
        return {**leg.scram("consumer"), "sasl_mechanism": "SCRAM-SHA-256"}
    if fault == "missing CA":
        return {**leg.scram("consumer"), "ssl_cafile": None}
    if fault in ("untrusted certificate", "expired certificate"):
        pair = certificates.client(
            "consumer", untrusted=fault.startswith("untrusted"), expired=fault.startswith("expired")
        )
        return leg.mutual_tls(pair)
    if fault == "no client certificate":
        return {**leg.settings(leg.kafka.mtls_bootstrap_servers), "security_protocol": "SSL"}
    return {**leg.settings(leg.kafka.sasl_bootstrap_servers), "ssl_cafile": None}


@pytest.mark.parametrize("fault", list(REFUSALS))
def test_a_refused_connection_is_one_line_naming_the_setting(leg: Leg, fault: str) -> None:
    config = consumer_config(refused_settings(leg, fault), "refused")
    options = config.kafka_client_options()

    async def connect() -> Refusal:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(
            bootstrap_servers=config.bootstrap_servers, request_timeout_ms=5000, **options
        )
        try:
            await admin.start()
        except KafkaError as exc:  # aiokafka says only that it could not bootstrap
            return await refusal(exc, config.bootstrap_servers, config, options)
        finally:
            await admin.close()
        raise AssertionError(f"{fault}: the broker took the connection")

    found = asyncio.run(connect())
    kind, named = REFUSALS[fault]
    assert found.kind is kind and named in found.line
    assert "\n" not in found.line and "Traceback" not in found.line


def test_a_sidecar_refused_by_kafka_says_why_in_healthz_status_and_metrics(
    leg: Leg, tmp_path: Path
) -> None:
    port = free_port()
    password = tmp_path / "password"
    password.write_text("not-the-sidecar-password\n")
    settings = {**leg.scram("sidecar"), "sasl_plain_password": None}
    environment = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        **{
            env_name(k): ",".join(v) if isinstance(v, tuple) else str(v)
            for k, v in settings.items()
            if v is not None
        },
        "AUTOSCALER_SASL_PASSWORD_FILE": str(password),
        "AUTOSCALER_SCALER": "none",
        "AUTOSCALER_HTTP_PORT": str(port),
        "AUTOSCALER_LOCK_FILE": str(tmp_path / "lock"),
    }
    sidecar = subprocess.Popen(
        [sys.executable, "-m", "sidecar.cli"],
        env=environment,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: "refused" in " ".join(status(port).get("problems", [])), 60)
        with pytest.raises(urllib.error.HTTPError) as unhealthy:
            urllib.request.urlopen(base + "/healthz", timeout=5)
        assert unhealthy.value.code == 503
        why = unhealthy.value.read().decode().splitlines()
        assert why[0] == "unhealthy" and f"sasl_password_file {password}" in why[1]
        page = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
        assert 'autoscaler_kafka_connect_problem{kind="credentials"} 1.0' in page
        assert sidecar.poll() is None  # still retrying
    finally:
        errors = stop_sidecar_process(sidecar)
    assert "not-the-sidecar-password" not in errors  # the secret itself is never logged
    assert "refused the SCRAM-SHA-512 credentials of sasl_plain_username='sidecar'" in errors


def test_a_refused_consumer_says_why_keeps_retrying_and_stops(
    leg: Leg, caplog: pytest.LogCaptureFixture
) -> None:
    config = consumer_config(refused_settings(leg, "expired certificate"), "expired-0")
    member = ThreadedMember(config, CallbackSink(SeenRecords().write)).start()

    def said_why() -> bool:
        return any("it has expired" in r.getMessage() for r in caplog.records)

    try:
        assert wait_until(said_why, 60)
        gauge = REGISTRY.get_sample_value(
            "autoscaler_consumer_kafka_connect_problem", {"group": GROUP, "kind": "certificate"}
        )
        assert gauge == 1.0
        line = next(r.getMessage() for r in caplog.records if "it has expired" in r.getMessage())
        assert line.startswith(f"joining group {GROUP} failed: Kafka at ") and "retrying" in line
    finally:
        member.stop()  # a stop while it waits to retry ends it at once
