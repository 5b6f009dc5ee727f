"""The sidecar as KEDA's external scaler (``--scaler keda``): the protocol's wire format, the
answers and refusals, the gRPC service called the way KEDA calls it, and the sidecar's count
reaching the metric KEDA's HPA scales on."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from confluent_kafka import Producer
from hypothesis import given, settings
from hypothesis import strategies as st

from contract.local_ports import free_port
from local_kafka.secured import Certificates
from sidecar.app import Sidecar
from sidecar.config import parse_args
from sidecar.external_scaler import messages
from sidecar.external_scaler.answers import (
    METRIC_NAME,
    Answers,
    Code,
    Refused,
    ScaledObject,
)
from sidecar.external_scaler.server import MAX_STREAMS, ExternalScalerServer, Tls, serve_keda
from sidecar.leader import FileLease
from sidecar.scalers.keda_target import KedaTarget
from tests.sdk_helpers import stop_sidecar_process, wait_until
from tests.test_sidecar_app import loop_config

ROOT = Path(__file__).parent.parent

# What KEDA sends: the ScaledObject's name and namespace, and the trigger's whole metadata.
KEDA_METADATA = {"scalerAddress": "sidecar.kafka:6000", "group": "orders"}


def test_messages_have_the_protocols_field_numbers_and_types() -> None:
    # Bytes worked out by hand from externalscaler.proto: field 1 and 2 strings (tag 0x0a,
    # 0x12), the map as repeated entries in field 3 (0x1a); MetricValue's int64 in field 2
    # (varint, 0x10) and double in field 3 (fixed 64, 0x19).
    ref = messages.ScaledObjectRef(name="so", namespace="ns", scalerMetadata={"k": "v"})
    assert ref.SerializeToString() == b"\x0a\x02so\x12\x02ns\x1a\x06\x0a\x01k\x12\x01v"
    value = messages.MetricValue(metricName="m", metricValue=3, metricValueFloat=3.0)
    assert value.SerializeToString() == b"\x0a\x01m\x10\x03\x19" + struct.pack("<d", 3.0)
    spec = messages.MetricSpec(metricName="m", targetSize=1, targetSizeFloat=1.0)
    assert spec.SerializeToString() == b"\x0a\x01m\x10\x01\x19" + struct.pack("<d", 1.0)
    request = messages.GetMetricsRequest(scaledObjectRef=ref, metricName="m")
    decoded = messages.GetMetricsRequest.FromString(request.SerializeToString())
    assert decoded.scaledObjectRef.name == "so"
    assert dict(decoded.scaledObjectRef.scalerMetadata) == {"k": "v"}
    assert messages.IsActiveResponse(result=True).SerializeToString() == b"\x08\x01"


def answers(count: Callable[[], int | None] = lambda: 3) -> Answers:
    return Answers("orders-consumers", "kafka", "orders", count)


def so(name: str = "orders-consumers", **metadata: str) -> ScaledObject:
    return ScaledObject(name, "kafka", metadata or KEDA_METADATA)


def test_the_metric_is_the_sidecars_count_with_a_target_of_one() -> None:
    count: list[int | None] = [3]
    served = answers(lambda: count[0])
    assert served.metric_spec(so()) == (METRIC_NAME, 1.0)
    assert served.metric_value(so(), METRIC_NAME) == (METRIC_NAME, 3.0)
    assert served.is_active(so()) is True
    count[0] = 0
    assert served.is_active(so()) is False
    assert served.metric_value(so(), METRIC_NAME) == (METRIC_NAME, 0.0)


@pytest.mark.parametrize(
    ("ref", "metric", "code", "line"),
    [
        (
            so("payments"),
            METRIC_NAME,
            Code.NOT_FOUND,
            "ScaledObject 'kafka/payments' is not sized here: this sidecar answers for "
            "kafka/orders-consumers",
        ),
        (
            so(scalerAddress="x:6000", lagThreshold="10"),
            METRIC_NAME,
            Code.INVALID_ARGUMENT,
            "trigger metadata 'lagThreshold': not a key of this scaler (accepted: enableTLS, "
            "group, scalerAddress, unsafeSsl)",
        ),
        (
            so(scalerAddress="x:6000", group="payments"),
            METRIC_NAME,
            Code.INVALID_ARGUMENT,
            "trigger metadata group: 'payments' is not the consumer group this sidecar sizes "
            "('orders')",
        ),
        (
            so(),
            "s0-kafka-autoscaler-consumers",
            Code.INVALID_ARGUMENT,
            "metricName: 's0-kafka-autoscaler-consumers' is not a metric of this scaler",
        ),
    ],
)
def test_bad_calls_are_refused_naming_what_is_wrong(
    ref: ScaledObject, metric: str, code: Code, line: str
) -> None:
    with pytest.raises(Refused) as refused:
        answers().metric_value(ref, metric)
    assert refused.value.code is code
    assert refused.value.line.startswith(line)


def test_keda_keys_resolved_from_the_environment_are_accepted() -> None:
    ref = so(scalerAddress="x:6000", groupFromEnv="orders", enableTLS="false")
    assert answers().metric_value(ref, METRIC_NAME) == (METRIC_NAME, 3.0)


def test_no_count_yet_is_unavailable_not_zero() -> None:
    with pytest.raises(Refused) as refused:
        answers(lambda: None).metric_value(so(), METRIC_NAME)
    assert refused.value.code is Code.UNAVAILABLE
    assert "has not sized group 'orders' yet" in refused.value.line


@given(
    name=st.text(max_size=20),
    namespace=st.sampled_from(["kafka", "", "default"]),
    metadata=st.dictionaries(
        st.sampled_from(["scalerAddress", "group", "groupFromEnv", "x", ""]) | st.text(max_size=8),
        st.sampled_from(["orders", ""]) | st.text(max_size=8),
        max_size=4,
    ),
    metric=st.sampled_from([METRIC_NAME, ""]) | st.text(max_size=30),
)
def test_any_call_is_answered_or_refused_with_a_line(
    name: str, namespace: str, metadata: dict[str, str], metric: str
) -> None:
    ref = ScaledObject(name, namespace, metadata)
    try:
        assert answers().metric_value(ref, metric) == (METRIC_NAME, 3.0)
    except Refused as refused:
        assert refused.line and "\n" not in refused.line


class KedaClient:
    """Calls the service the way KEDA's external scaler does (externalscaler.proto's paths)."""

    def __init__(self, port: int, credentials: grpc.ChannelCredentials | None = None) -> None:
        target = f"127.0.0.1:{port}"
        self.channel = (
            grpc.insecure_channel(target)
            if credentials is None
            else grpc.secure_channel(target, credentials)
        )

    def _call(self, method: str, response: Any, stream: bool = False) -> Any:
        path = f"/{messages.SERVICE}/{method}"
        make = self.channel.unary_stream if stream else self.channel.unary_unary
        return make(
            path,
            request_serializer=lambda message: message.SerializeToString(),
            response_deserializer=response.FromString,
        )

    def ref(self, name: str = "orders-consumers") -> Any:
        return messages.ScaledObjectRef(name=name, namespace="kafka", scalerMetadata=KEDA_METADATA)

    def metrics(self, name: str = "orders-consumers") -> float:
        request = messages.GetMetricsRequest(scaledObjectRef=self.ref(name), metricName=METRIC_NAME)
        response = self._call("GetMetrics", messages.GetMetricsResponse)(request, timeout=10)
        (value,) = response.metricValues
        assert value.metricName == METRIC_NAME and value.metricValue == int(value.metricValueFloat)
        return float(value.metricValueFloat)

    def spec(self) -> Any:
        response = self._call("GetMetricSpec", messages.GetMetricSpecResponse)(
            self.ref(), timeout=10
        )
        (spec,) = response.metricSpecs
        return spec

    def is_active(self) -> bool:
        response = self._call("IsActive", messages.IsActiveResponse)(self.ref(), timeout=10)
        return bool(response.result)

    def stream_is_active(self) -> Iterator[Any]:
        call: Iterator[Any] = self._call("StreamIsActive", messages.IsActiveResponse, True)(
            self.ref(), timeout=30
        )
        return call

    def stream_metric_spec(self) -> Iterator[Any]:
        call: Iterator[Any] = self._call(
            "StreamMetricSpec", messages.GetMetricSpecResponse, stream=True
        )(self.ref(), timeout=10)
        return call


@contextlib.contextmanager
def serving(count: list[int | None]) -> Iterator[tuple[KedaClient, ExternalScalerServer]]:
    """The service answering with ``count[0]``, and a client calling it as KEDA does."""
    server = serve_keda("127.0.0.1", 0, answers(lambda: count[0]), poll_s=0.01)
    client = KedaClient(server.port)
    try:
        yield client, server
    finally:
        client.channel.close()
        server.stop(grace_s=0)


@pytest.fixture
def served() -> Iterator[tuple[list[int | None], KedaClient, ExternalScalerServer]]:
    count: list[int | None] = [None]
    with serving(count) as (client, server):
        yield count, client, server


def test_the_service_answers_keda_over_grpc(
    served: tuple[list[int | None], KedaClient, ExternalScalerServer],
) -> None:
    count, client, _ = served
    with pytest.raises(grpc.RpcError) as starting:
        client.metrics()
    assert starting.value.code() is grpc.StatusCode.UNAVAILABLE
    count[0] = 5
    assert client.metrics() == 5.0
    assert client.is_active() is True
    spec = client.spec()
    assert (spec.metricName, spec.targetSize, spec.targetSizeFloat) == (METRIC_NAME, 1, 1.0)
    with pytest.raises(grpc.RpcError) as unknown:
        client.metrics("payments")
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
    assert "'kafka/payments' is not sized here" in (unknown.value.details() or "")
    # KEDA falls back to GetMetricSpec when a scaler does not stream its specs.
    with pytest.raises(grpc.RpcError) as unimplemented:
        next(iter(client.stream_metric_spec()))
    assert unimplemented.value.code() is grpc.StatusCode.UNIMPLEMENTED


@settings(max_examples=50, deadline=None)
@given(payload=st.binary(max_size=64))
def test_bytes_that_are_not_a_request_leave_the_service_serving(payload: bytes) -> None:
    with serving([3]) as (client, _):
        raw = client.channel.unary_unary(
            f"/{messages.SERVICE}/GetMetrics",
            request_serializer=lambda data: data,
            response_deserializer=messages.GetMetricsResponse.FromString,
        )
        try:
            raw(payload, timeout=10)
        except grpc.RpcError as refused:
            assert refused.code() in {
                grpc.StatusCode.NOT_FOUND,
                grpc.StatusCode.INVALID_ARGUMENT,
                grpc.StatusCode.INTERNAL,  # not a GetMetricsRequest at all
            }
        assert client.metrics() == 3.0


def test_stream_is_active_sends_the_answer_then_each_change(
    served: tuple[list[int | None], KedaClient, ExternalScalerServer],
) -> None:
    count, client, _ = served
    count[0] = 2
    stream = client.stream_is_active()
    assert next(stream).result is True
    changed = threading.Event()

    def to_zero() -> None:
        count[0] = 0
        changed.set()

    threading.Thread(target=to_zero).start()
    assert next(stream).result is False
    assert changed.is_set()


def test_a_port_in_use_is_one_line_naming_the_flags(
    served: tuple[list[int | None], KedaClient, ExternalScalerServer],
) -> None:
    _, _, server = served
    with pytest.raises(RuntimeError) as in_use:
        serve_keda("127.0.0.1", server.port, answers())
    assert str(in_use.value).startswith(
        f"--keda-host/--keda-port (AUTOSCALER_KEDA_HOST/PORT): cannot serve on 127.0.0.1:"
        f"{server.port}"
    )


def test_keda_settings_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--bootstrap-servers", "k:9092", "--group", "g", "--topics", "a", "--capacity", "9"]
    config = parse_args([*base, "--scaler", "keda", "--workload-name", "sink"], {})
    assert (config.scaled_object, config.keda_port, config.keda_host) == ("sink", 6000, "127.0.0.1")
    for argv, line in [
        (["--scaler", "keda"], "--scaled-object (AUTOSCALER_SCALED_OBJECT) must be"),
        (["--scaler", "keda", "--scaled-object", "s", "--keda-port", "70000"], "--keda-port"),
    ]:
        with pytest.raises(SystemExit) as exited:
            parse_args([*base, *argv], {})
        assert exited.value.code == 2
        assert line in capsys.readouterr().err


def test_the_leaders_count_reaches_kedas_metric(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(4)
    config = loop_config(
        kafka,
        topic,
        snapshot_topic=topic_factory(1, prefix="speeds"),
        scaler="keda",
        scaled_object="orders-consumers",
        namespace="kafka",
        lock_file=str(tmp_path / "lock"),
    )
    clock = [5000.0]
    target = KedaTarget()
    leader = Sidecar(config, target, FileLease(config.lock_path), clock=lambda: clock[0])
    standby = Sidecar(config, KedaTarget(), FileLease(config.lock_path), clock=lambda: clock[0])
    group_answers = Answers("orders-consumers", "kafka", config.group, leader.sized)
    standby_answers = Answers("orders-consumers", "kafka", config.group, standby.sized)
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})

    async def run() -> None:
        await leader.start()
        await standby.start()
        try:
            for _ in range(5):  # 90 records/s on each of 4 partitions, 100 per consumer
                for partition in range(4):
                    for _ in range(90):
                        producer.produce(topic, value=b"v", partition=partition)
                assert producer.flush(30) == 0
                clock[0] += 1.0
                await leader.tick()
                await standby.tick()
        finally:
            await standby.stop()
            await leader.stop()

    ref = ScaledObject("orders-consumers", "kafka", {**KEDA_METADATA, "group": config.group})
    with pytest.raises(Refused):  # nothing measured yet
        group_answers.metric_value(ref, METRIC_NAME)
    asyncio.run(run())
    assert target.replicas() == 4  # 4 x 90 cannot share a consumer of 100
    assert group_answers.metric_value(ref, METRIC_NAME) == (METRIC_NAME, 4.0)
    with pytest.raises(Refused) as standing_by:  # the standby leaves the answer to the leader
        standby_answers.metric_value(ref, METRIC_NAME)
    assert standing_by.value.code is Code.UNAVAILABLE


def test_the_sidecar_process_serves_keda_and_stops_on_sigterm(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(3)
    port = free_port()
    sidecar = subprocess.Popen(
        [
            *(sys.executable, "-m", "sidecar.cli", "--bootstrap-servers", kafka),
            *("--group", "orders", "--topics", topic, "--capacity", "100"),
            *("--snapshot-topic", topic_factory(1, prefix="speeds"), "--min-window", "2"),
            *("--scaler", "keda", "--scaled-object", "orders-consumers", "--namespace", "kafka"),
            *("--keda-port", str(port), "--http-port", "0", "--lock-file", str(tmp_path / "l")),
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    client = KedaClient(port)
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
    counts: list[float] = []

    def sized() -> bool:
        for partition in range(3):  # a load at each poll (every 50 ms) of wait_until
            for _ in range(6):
                producer.produce(topic, value=b"v", partition=partition)
        producer.flush(10)
        try:
            counts.append(client.metrics())
        except grpc.RpcError as error:
            assert error.code() is grpc.StatusCode.UNAVAILABLE, error.details()
            return False
        return True

    try:
        assert wait_until(sized, 60)
        assert counts[-1] >= 1
        assert client.is_active() is True
    finally:
        client.channel.close()
        stop_sidecar_process(sidecar)


def tls_credentials(pki: Certificates, client: bool) -> grpc.ChannelCredentials:
    """What KEDA's scaler presents: the CA it trusts (caCert) and, for mutual TLS, its own
    certificate and key (tlsClientCert, tlsClientKey)."""
    pair = pki.client("keda-operator") if client else None
    return grpc.ssl_channel_credentials(
        root_certificates=pki.ca.certificate.read_bytes(),
        private_key=pair.key.read_bytes() if pair else None,
        certificate_chain=pair.certificate.read_bytes() if pair else None,
    )


def test_over_mutual_tls_a_client_without_a_certificate_is_refused(tmp_path: Path) -> None:
    pki = Certificates.make(tmp_path / "pki")
    served = pki.serving("keda-scaler", "sizer", ["127.0.0.1"])
    tls = Tls(str(served.certificate), str(served.key), str(pki.ca.certificate))
    server = serve_keda("127.0.0.1", 0, answers(lambda: 4), poll_s=0.01, tls=tls)
    trusted = KedaClient(server.port, tls_credentials(pki, client=True))
    anonymous = KedaClient(server.port, tls_credentials(pki, client=False))
    plain = KedaClient(server.port)
    try:
        assert trusted.metrics() == 4.0
        for refused in (anonymous, plain):
            with pytest.raises(grpc.RpcError) as failed:
                refused.metrics()
            assert failed.value.code() is grpc.StatusCode.UNAVAILABLE  # the handshake fails
    finally:
        for client in (trusted, anonymous, plain):
            client.channel.close()
        server.stop(grace_s=0)


def test_streams_beyond_the_cap_are_refused_and_polls_still_answered(
    served: tuple[list[int | None], KedaClient, ExternalScalerServer],
) -> None:
    count, client, _ = served
    count[0] = 2
    streams = [client.stream_is_active() for _ in range(MAX_STREAMS)]
    try:
        assert all(next(iter(stream)).result is True for stream in streams)  # all open
        with pytest.raises(grpc.RpcError) as refused:
            next(iter(client.stream_is_active()))
        assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"{MAX_STREAMS} streams are open already" in (refused.value.details() or "")
        assert client.metrics() == 2.0  # the polls KEDA makes meanwhile
    finally:
        for stream in streams:
            stream.cancel()  # type: ignore[attr-defined]
    # A stream closed gives its place back.
    assert wait_until(lambda: _opens(client), timeout_s=10)


def _opens(client: KedaClient) -> bool:
    stream = client.stream_is_active()
    try:
        return bool(next(iter(stream)).result)
    except grpc.RpcError:
        return False
    finally:
        stream.cancel()  # type: ignore[attr-defined]
