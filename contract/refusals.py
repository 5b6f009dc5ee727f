"""Why Kafka would not take a client's connection, as one line naming the setting to check.

aiokafka's clients fail to start with "Unable to bootstrap from [...]" whatever went wrong:
the reason (a refused password, a certificate the broker did not accept, a listener that
speaks another protocol) is only in a log line of its own. :func:`diagnose` connects once
more the way the clients do and :func:`explain` turns what it met into one line that says
which setting to look at, for the log, ``/healthz``, ``/status`` and a metric's label.
"""

from __future__ import annotations

import enum
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    IllegalSaslStateError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    UnsupportedSaslMechanismError,
)

from contract.kafka_client.connections import probe
from contract.security import SECURITY_PROTOCOLS, SecurityFields


class Kind(enum.Enum):
    """What kind of refusal (a metric label)."""

    UNREACHABLE = "unreachable"
    PROTOCOL = "protocol"
    CREDENTIALS = "credentials"
    CERTIFICATE = "certificate"
    AUTHORIZATION = "authorization"


@dataclass(frozen=True)
class Refusal:
    """Why a connection failed: its kind and the one line to show."""

    kind: Kind
    line: str


def flags(found: Refusal | None) -> dict[Kind, int]:
    """Each kind of refusal, 1 for the one ``found`` (none when it is None): the values of
    the refused-connection gauge that the sidecar and the consumer both export."""
    return {kind: int(found is not None and found.kind is kind) for kind in Kind}


_AUTHORIZATION_ERRORS = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    ClusterAuthorizationFailedError,
)
# TLS alerts a broker sends when it does not accept the client's certificate.
_CERTIFICATE_ALERTS = ("CERTIFICATE_UNKNOWN", "BAD_CERTIFICATE", "UNKNOWN_CA", "EXPIRED")


def explain(error: BaseException, address: str, settings: SecurityFields) -> Refusal:
    """The refusal behind ``error``, met connecting to ``address`` (host:port) with
    ``settings`` (a refused client certificate is also checked for expiry)."""
    protocol = settings.security_protocol
    cause = error.__cause__ or error.__context__
    if isinstance(error, SaslAuthenticationFailed):
        if settings.sasl_mechanism == "OAUTHBEARER":
            source = "the token in sasl_oauth_token_file"
        else:
            source = "sasl_plain_password" + (
                f" (read from sasl_password_file {settings.sasl_password_file})"
                if settings.sasl_password_file
                else ""
            )
        return Refusal(
            Kind.CREDENTIALS,
            f"Kafka at {address} refused the {settings.sasl_mechanism} credentials of "
            f"sasl_plain_username={settings.sasl_plain_username!r}: check {source}",
        )
    if isinstance(error, UnsupportedSaslMechanismError):
        return Refusal(
            Kind.CREDENTIALS,
            f"Kafka at {address} does not offer sasl_mechanism={settings.sasl_mechanism} on "
            "this listener: use one it enables (its sasl.enabled.mechanisms)",
        )
    if isinstance(error, ssl.SSLCertVerificationError):
        given = f"ssl_cafile={settings.ssl_cafile}" if settings.ssl_cafile else "ssl_cafile (unset)"
        return Refusal(
            Kind.CERTIFICATE,
            f"the certificate of Kafka at {address} was not trusted "
            f"({error.verify_message}): {given} must hold the CA that signed it",
        )
    if isinstance(error, ssl.SSLError) or isinstance(cause, ssl.SSLError):
        tls = error if isinstance(error, ssl.SSLError) else cause
        reason = str(getattr(tls, "reason", "") or tls)
        if any(alert in reason for alert in _CERTIFICATE_ALERTS):
            return _client_certificate_refused(address, settings, reason)
        return Refusal(
            Kind.PROTOCOL,
            f"the TLS handshake with Kafka at {address} failed ({reason}): is the listener "
            f"a TLS one (security_protocol={protocol})?",
        )
    if isinstance(error, IllegalSaslStateError):
        return Refusal(
            Kind.PROTOCOL,
            f"Kafka at {address} does not authenticate with SASL on this listener: "
            f"security_protocol={protocol} does not match it",
        )
    closed = isinstance(error, KafkaConnectionError) and "closed" in str(error)
    if closed or isinstance(error, ConnectionResetError):
        others = ", ".join(p for p in SECURITY_PROTOCOLS if p != protocol)
        return Refusal(
            Kind.PROTOCOL,
            f"Kafka at {address} closed the connection at once: security_protocol={protocol} "
            f"is probably not what this listener speaks ({others}?)",
        )
    if isinstance(error, _AUTHORIZATION_ERRORS):
        return Refusal(
            Kind.AUTHORIZATION,
            f"Kafka at {address} denied {type(error).__name__.removesuffix('Error')} to this "
            f"principal ({_principal(settings)}): an ACL must allow it",
        )
    return Refusal(Kind.UNREACHABLE, f"cannot reach Kafka at {address}: {error!r}")


def _client_certificate_refused(address: str, settings: SecurityFields, reason: str) -> Refusal:
    if settings.ssl_certfile is None:
        return Refusal(
            Kind.CERTIFICATE,
            f"Kafka at {address} wants a client certificate ({reason}): set ssl_certfile "
            "and ssl_keyfile (mutual TLS)",
        )
    if settings.ssl_keyfile is not None and certificate_expired(
        settings.ssl_certfile, settings.ssl_keyfile
    ):
        why = "it has expired"
    else:
        why = "expired, revoked, or not signed by a CA the broker trusts"
    return Refusal(
        Kind.CERTIFICATE,
        f"Kafka at {address} did not accept the client certificate "
        f"ssl_certfile={settings.ssl_certfile} ({why}; {reason})",
    )


def _principal(settings: SecurityFields) -> str:
    if settings.sasl_plain_username:
        return f"sasl_plain_username={settings.sasl_plain_username!r}"
    if settings.ssl_certfile:
        return f"the subject of ssl_certfile={settings.ssl_certfile}"
    return f"security_protocol={settings.security_protocol}"


def certificate_expired(certfile: str, keyfile: str) -> bool:
    """Whether a client certificate's validity has ended, found by an in-memory TLS
    handshake in which it is presented to a server that trusts it as its own anchor, so
    that only its dates and purpose are checked (the standard library has no public
    certificate parser)."""
    try:
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(certfile, keyfile)
        server.verify_mode = ssl.CERT_REQUIRED
        server.load_verify_locations(certfile)
        server.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client.check_hostname = False
        client.verify_mode = ssl.CERT_NONE
        client.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError):
        return False
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    near = client.wrap_bio(to_client, to_server)
    far = server.wrap_bio(to_server, to_client, server_side=True)
    for _ in range(10):
        for end in (near, far):
            try:
                end.do_handshake()
            except ssl.SSLCertVerificationError as exc:
                return "expired" in str(exc.verify_message)
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError:
                return False
    return False


async def diagnose(
    bootstrap_servers: str,
    settings: SecurityFields,
    options: Mapping[str, Any],
    *,
    timeout_s: float = 10.0,
) -> Refusal | None:
    """Connect to each bootstrap server with the clients' ``options`` (from
    :func:`contract.security.aiokafka_options`); ``None`` if one takes the connection (the
    failure was elsewhere), else the refusal of the first server."""
    first: Refusal | None = None
    for address in bootstrap_servers.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            await probe(host, int(port), options, timeout_s)
        except (OSError, KafkaError, TimeoutError) as exc:
            first = first or explain(exc, address.strip(), settings)
            continue
        return None
    return first


async def refusal(
    error: BaseException,
    bootstrap_servers: str,
    settings: SecurityFields,
    options: Mapping[str, Any],
) -> Refusal:
    """Why a client failed to start with ``error``: an authorization error says so
    itself; a failed bootstrap is diagnosed by connecting again."""
    if isinstance(error, KafkaConnectionError):
        found = await diagnose(bootstrap_servers, settings, options)
        if found is not None:
            return found
    return explain(error, bootstrap_servers, settings)
