"""A secured Apache Kafka leg: TLS certificates made here, SCRAM users and an authorizer.

:class:`SecuredListeners` adds two listeners to every node of an
:class:`~local_kafka.apache_kafka.ApacheKafka` cluster, beside its PLAINTEXT one (which stays
the harness's own door: topics, ACLs and the inter-node traffic go through it, its principal
``User:ANONYMOUS`` is a super user):

- ``SASL_SSL`` with SCRAM-SHA-512, the users and passwords given (created when the nodes'
  storage is formatted), the server certificate signed by a CA made here;
- ``SSL`` with client certificates required (mutual TLS): the principal is the
  certificate's common name.

``StandardAuthorizer`` denies what no ACL allows; :meth:`SecuredListeners.allow` writes ACLs.
Certificates are made with the ``cryptography`` package: a CA, the nodes' certificate for
127.0.0.1 and ``localhost``, client certificates per user, and, for tests of refusals, an
expired certificate and one from a CA the brokers do not trust.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.broker_plans import PLANS_TOPIC, plans_topic_for

SCRAM = "SCRAM-SHA-512"
SUPER_USER = "User:ANONYMOUS"  # the PLAINTEXT listener's principal (the harness)
# The SCRAM user the brokers' assignors read the sidecar's plans and loads as, when the
# cluster loads them (a principal of its own, so ACLs can show what it may do).
ASSIGNOR_USER = "assignor"


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, as PEM files."""

    certificate: Path
    key: Path


@dataclass
class Certificates:
    """A CA and what it signed, written under ``directory``."""

    directory: Path
    ca: KeyPair
    server: KeyPair
    clients: dict[str, KeyPair] = field(default_factory=dict)

    @classmethod
    def make(cls, directory: Path, clients: Iterable[str] = ()) -> Certificates:
        """A new CA, the nodes' certificate and one client certificate per name."""
        directory.mkdir(parents=True, exist_ok=True)
        ca_key, ca_cert = _self_signed("kafka-autoscaler test CA")
        ca = _write(directory, "ca", ca_key, ca_cert)
        server = _write(directory, "server", *_signed(ca_key, ca_cert, "127.0.0.1", server=True))
        made = cls(directory, ca, server)
        for name in clients:
            made.client(name)
        return made

    def client(self, name: str, *, expired: bool = False, untrusted: bool = False) -> KeyPair:
        """A client certificate with common name ``name`` (``expired``: its validity ended
        yesterday; ``untrusted``: signed by a CA of its own)."""
        if untrusted:
            issuer_key, issuer_cert = _self_signed("an untrusted CA")
        else:
            issuer_key, issuer_cert = _load(self.ca)
        key, cert = _signed(issuer_key, issuer_cert, name, server=False, expired=expired)
        label = (
            f"client-{name}" + ("-expired" if expired else "") + ("-untrusted" if untrusted else "")
        )
        pair = _write(self.directory, label, key, cert)
        if not expired and not untrusted:
            self.clients[name] = pair
        return pair

    def serving(self, label: str, name: str, hosts: Iterable[str]) -> KeyPair:
        """A certificate signed by the CA for ``hosts`` (IP addresses or DNS names), good
        both to serve and to authenticate as a client: what a service that is also a mutual
        TLS client needs (KEDA's operator and metrics server share one)."""
        issuer_key, issuer_cert = _load(self.ca)
        key, cert = _signed(issuer_key, issuer_cert, name, server=True, client=True, hosts=hosts)
        return _write(self.directory, label, key, cert)


@dataclass
class SecuredListeners:
    """The secured listeners' settings for every node, and the users they know."""

    certificates: Certificates
    users: Mapping[str, str]
    """SCRAM user -> password."""

    def node_properties(self, sasl_port: int, mtls_port: int) -> dict[str, str]:
        """Properties added to a node's (merged into its listener lists by the caller)."""
        pem = self.certificates
        return {
            "sasl.enabled.mechanisms": SCRAM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(_keystore(pem.server)),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pem.ca.certificate),
            "listener.name.ssl.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/,DEFAULT",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": SUPER_USER,
            "allow.everyone.if.no.acl.found": "false",
        }

    def reader_properties(self, user: str = ASSIGNOR_USER) -> dict[str, str]:
        """Java client properties of ``user`` on the SASL_SSL listeners: what the brokers'
        assignors get under ``autoscaler.plans.client.`` to read the sidecar's topics."""
        if user not in self.users:
            raise ValueError(
                f"users must include {user!r} (the assignors' reader), got {sorted(self.users)}"
            )
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM,
            "sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{user}" password="{self.users[user]}";'
            ),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.certificates.ca.certificate),
        }

    def format_arguments(self) -> list[str]:
        """``kafka-storage format`` arguments that create the SCRAM users."""
        arguments: list[str] = []
        for user, password in self.users.items():
            arguments += ["--add-scram", f"{SCRAM}=[name={user},password={password}]"]
        return arguments

    @staticmethod
    def allow(
        admin: Any,
        principal: str,
        *,
        topics: Iterable[tuple[str, str]] = (),
        groups: Iterable[tuple[str, str]] = (),
        cluster: Iterable[str] = (),
    ) -> None:
        """Allow ``User:principal`` operations through ``admin`` (a confluent-kafka
        AdminClient on the PLAINTEXT listener): ``(topic, operation)``, ``(group,
        operation)``, cluster operations; names may be prefixes ending in ``*``."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        bindings = []
        wanted = [
            *((ResourceType.TOPIC, name, op) for name, op in topics),
            *((ResourceType.GROUP, name, op) for name, op in groups),
            *((ResourceType.BROKER, "kafka-cluster", op) for op in cluster),
        ]
        for kind, name, operation in wanted:
            prefixed = name.endswith("*") and name != "*"
            bindings.append(
                AclBinding(
                    kind,
                    name[:-1] if prefixed else name,
                    ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL,
                    f"User:{principal}",
                    "*",
                    AclOperation[operation.upper()],
                    AclPermissionType.ALLOW,
                )
            )
        for future in admin.create_acls(bindings).values():
            future.result(30)


def grant_group(
    admin: Any,
    *,
    group: str,
    topics: Iterable[str],
    speeds: str,
    consumer: str = "consumer",
    sidecar: str = "sidecar",
) -> None:
    """The ACLs of docs/security.md for one group: ``consumer`` reads ``topics`` (names, or
    prefixes ending in ``*``), the speeds topic and its group (and groups it prefixes);
    ``sidecar`` describes the topics, the group and the cluster and alone writes (and may
    create) the speeds topic."""
    names = list(topics)
    SecuredListeners.allow(
        admin,
        consumer,
        topics=[*((t, "read") for t in names), *((t, "describe") for t in names), (speeds, "read")],
        groups=[(f"{group}*", "read")],
    )
    SecuredListeners.allow(
        admin,
        sidecar,
        topics=[
            *((t, "describe") for t in names),
            (speeds, "write"),
            (speeds, "create"),
            (speeds, "describe"),
        ],
        groups=[(group, "describe")],
        cluster=["describe"],
    )


def grant_plans(
    admin: Any,
    *,
    group: str,
    sidecar: str = "sidecar",
    reader: str = ASSIGNOR_USER,
) -> None:
    """The ACLs of docs/security.md for a KIP-848 group sized through the brokers' assignor:
    ``sidecar`` alone writes (and may create) ``group``'s plans topic (whoever writes it
    decides the group's assignments), reads the brokers' configs (is the assignor loaded?)
    and joins ``group`` with its control members; the brokers' ``reader`` reads every
    group's plans topic (a prefixed ACL)."""
    topic = plans_topic_for(group)
    SecuredListeners.allow(
        admin,
        sidecar,
        topics=[(topic, "write"), (topic, "describe"), (topic, "create")],
        groups=[(group, "read")],
        cluster=["describe_configs"],
    )
    SecuredListeners.allow(
        admin,
        reader,
        topics=[(f"{PLANS_TOPIC}.*", "read"), (f"{PLANS_TOPIC}.*", "describe")],
    )


def scram_environment(
    bootstrap_servers: str, certificates: Certificates, user: str, password_file: Path
) -> dict[str, str]:
    """The ``AUTOSCALER_*`` security variables of ``user`` on the SASL_SSL listeners."""
    return {
        "AUTOSCALER_BOOTSTRAP_SERVERS": bootstrap_servers,
        "AUTOSCALER_SECURITY_PROTOCOL": "SASL_SSL",
        "AUTOSCALER_SASL_MECHANISM": SCRAM,
        "AUTOSCALER_SSL_CAFILE": str(certificates.ca.certificate),
        "AUTOSCALER_SASL_PLAIN_USERNAME": user,
        "AUTOSCALER_SASL_PASSWORD_FILE": str(password_file),
    }


def _self_signed(name: str) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _signed(
    issuer_key: Any,
    issuer_cert: Any,
    name: str,
    *,
    server: bool,
    client: bool = False,
    expired: bool = False,
    hosts: Iterable[str] = ("127.0.0.1", "localhost"),
) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    start, end = (
        (now - datetime.timedelta(days=3), now - datetime.timedelta(days=1))
        if expired
        else (now - datetime.timedelta(days=1), now + datetime.timedelta(days=30))
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(issuer_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH] * server
                + [ExtendedKeyUsageOID.CLIENT_AUTH] * (client or not server)
            ),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_subject_alternative(host) for host in hosts]),
            critical=False,
        )
    return key, builder.sign(issuer_key, hashes.SHA256())


def _subject_alternative(host: str) -> Any:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write(directory: Path, label: str, key: Any, cert: Any) -> KeyPair:
    from cryptography.hazmat.primitives import serialization

    pair = KeyPair(directory / f"{label}.pem", directory / f"{label}-key.pem")
    pair.certificate.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pair.key.chmod(0o600)
    return pair


def _load(pair: KeyPair) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pair.key.read_bytes(), password=None)
    return key, x509.load_pem_x509_certificate(pair.certificate.read_bytes())


def _keystore(pair: KeyPair) -> Path:
    """Kafka's PEM key store: the private key, then the certificate chain, in one file."""
    path = pair.certificate.with_name(pair.certificate.stem + "-keystore.pem")
    path.write_bytes(pair.key.read_bytes() + pair.certificate.read_bytes())
    path.chmod(0o600)
    return path
