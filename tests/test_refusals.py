"""Why Kafka refused a connection, in one line naming the setting (contract.refusals): the
errors aiokafka raises for each refusal, as met on the secured Apache Kafka leg."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    IllegalSaslStateError,
    KafkaConnectionError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from contract.local_ports import free_port
from contract.refusals import Kind, certificate_expired, diagnose, explain, flags
from local_kafka.secured import Certificates

ADDRESS = "broker-1:9093"


@dataclass(frozen=True)
class Settings:
    security_protocol: str = "SASL_SSL"
    sasl_mechanism: str | None = "SCRAM-SHA-512"
    sasl_plain_username: str | None = "consumer"
    sasl_plain_password: str | None = None
    sasl_password_file: str | None = "/run/secrets/kafka-password"
    sasl_oauth_token_file: str | None = None
    ssl_cafile: str | None = "/run/secrets/ca.pem"
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None


def closed_by(tls_reason: str) -> KafkaConnectionError:
    """What aiokafka raises when the broker ends the handshake with a TLS alert."""
    error = KafkaConnectionError(f"Connection at {ADDRESS} closed")
    cause = ssl.SSLError(1, f"[SSL: {tls_reason}] sslv3 alert (_ssl.c:2580)")
    cause.reason = tls_reason
    error.__cause__ = cause
    return error


def unverified(message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"certificate verify failed: {message}")
    error.verify_message = message
    return error


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates.make(tmp_path_factory.mktemp("tls"), clients=["consumer"])


def test_a_refused_password_names_the_user_and_where_the_password_came_from() -> None:
    error = SaslAuthenticationFailed("Authentication failed due to invalid credentials")
    found = explain(error, ADDRESS, Settings())
    assert found.kind is Kind.CREDENTIALS
    assert "sasl_plain_username='consumer'" in found.line
    assert "sasl_password_file /run/secrets/kafka-password" in found.line
    token = Settings(sasl_mechanism="OAUTHBEARER", sasl_oauth_token_file="/t")
    assert "sasl_oauth_token_file" in explain(error, ADDRESS, token).line


def test_a_mechanism_the_listener_lacks_is_named() -> None:
    found = explain(UnsupportedSaslMechanismError(), ADDRESS, Settings(sasl_mechanism="PLAIN"))
    assert found.kind is Kind.CREDENTIALS and "sasl_mechanism=PLAIN" in found.line


def test_an_untrusted_broker_certificate_names_the_ca_setting() -> None:
    error = unverified("unable to get local issuer certificate")
    unset = explain(error, ADDRESS, Settings(ssl_cafile=None))
    assert unset.kind is Kind.CERTIFICATE
    assert "ssl_cafile (unset)" in unset.line and "unable to get local issuer" in unset.line
    assert "ssl_cafile=/run/secrets/ca.pem" in explain(error, ADDRESS, Settings()).line


def test_a_refused_client_certificate_says_whether_it_expired(
    certificates: Certificates,
) -> None:
    def refused(certfile: Path | None, keyfile: Path | None, alert: str) -> str:
        settings = Settings(
            security_protocol="SSL",
            sasl_mechanism=None,
            sasl_plain_username=None,
            sasl_password_file=None,
            ssl_certfile=None if certfile is None else str(certfile),
            ssl_keyfile=None if keyfile is None else str(keyfile),
        )
        found = explain(closed_by(alert), ADDRESS, settings)
        assert found.kind is Kind.CERTIFICATE
        return found.line

    expired = certificates.client("consumer", expired=True)
    untrusted = certificates.client("consumer", untrusted=True)
    alert = "SSLV3_ALERT_CERTIFICATE_UNKNOWN"
    assert "it has expired" in refused(expired.certificate, expired.key, alert)
    line = refused(untrusted.certificate, untrusted.key, alert)
    assert f"ssl_certfile={untrusted.certificate}" in line and "not signed by a CA" in line
    assert "set ssl_certfile and ssl_keyfile" in refused(None, None, "SSLV3_ALERT_BAD_CERTIFICATE")


def test_certificate_expiry_is_read_from_the_file(certificates: Certificates) -> None:
    good = certificates.clients["consumer"]
    expired = certificates.client("consumer", expired=True)
    assert certificate_expired(str(expired.certificate), str(expired.key))
    assert not certificate_expired(str(good.certificate), str(good.key))
    assert not certificate_expired("/no/such/file.pem", "/no/such/key.pem")


@pytest.mark.parametrize(
    ("error", "protocol", "hint"),
    [
        (KafkaConnectionError(f"Connection at {ADDRESS} closed"), "PLAINTEXT", "SASL_SSL?"),
        (ConnectionResetError(), "SSL", "security_protocol=SSL"),
        (IllegalSaslStateError(), "SASL_PLAINTEXT", "security_protocol=SASL_PLAINTEXT"),
    ],
)
def test_a_listener_speaking_another_protocol_names_security_protocol(
    error: BaseException, protocol: str, hint: str
) -> None:
    found = explain(error, ADDRESS, Settings(security_protocol=protocol))
    assert found.kind is Kind.PROTOCOL and hint in found.line


def test_authorization_and_unreachable() -> None:
    denied = explain(GroupAuthorizationFailedError(), ADDRESS, Settings())
    assert denied.kind is Kind.AUTHORIZATION
    assert "GroupAuthorizationFailed" in denied.line and "'consumer'" in denied.line
    gone = explain(ConnectionRefusedError(111, "Connect call failed"), ADDRESS, Settings())
    assert gone.kind is Kind.UNREACHABLE and gone.line.startswith(
        f"cannot reach Kafka at {ADDRESS}"
    )
    # The refused-connection gauge: one kind at 1, the others at 0; all 0 once connected.
    assert flags(gone) == {kind: int(kind is Kind.UNREACHABLE) for kind in Kind}
    assert set(flags(None).values()) == {0} and len(flags(None)) == len(Kind)


def test_diagnose_connects_to_each_server_and_explains_the_first() -> None:
    plain = Settings(security_protocol="PLAINTEXT", sasl_mechanism=None, sasl_password_file=None)
    servers = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    found = asyncio.run(diagnose(servers, plain, {"security_protocol": "PLAINTEXT"}))
    assert found is not None and found.kind is Kind.UNREACHABLE
    assert found.line.startswith(f"cannot reach Kafka at {servers.split(',')[0]}:")
