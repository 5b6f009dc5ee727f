"""How every Kafka client of the project connects to a secured cluster: TLS with a CA file,
mutual TLS (a client certificate and key), SASL PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER.

The settings are fields of :class:`contract.settings.GroupSettings`, so the consumers and
the sidecar (its offset reader, admin client and speeds producer) take the same
``AUTOSCALER_*`` variables and flags; this module checks them and turns them into aiokafka
client options (and librdkafka's, for share-group members). Secrets come from the environment
or from files (``sasl_password_file``, ``sasl_oauth_token_file``, read when a connection
authenticates, so a rotated file is picked up) and never appear in a repr or a log line.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, Protocol

from aiokafka.abc import AbstractTokenProvider

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")
# Mechanisms that authenticate with a user name and a password.
PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
TLS_FILES = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
SECRET_FILES = ("sasl_password_file", "sasl_oauth_token_file")
# Who a client is: each process has its own (the sidecar's principal alone may write the
# speeds topic), so these are never handed from the sidecar to the consumers it starts.
CREDENTIAL_FIELDS = (
    "sasl_plain_username",
    "sasl_plain_password",
    "sasl_password_file",
    "sasl_oauth_token_file",
    "ssl_certfile",
    "ssl_keyfile",
)


class SecurityFields(Protocol):
    """The security fields of the shared settings (read-only)."""

    @property
    def security_protocol(self) -> str: ...

    @property
    def sasl_mechanism(self) -> str | None: ...

    @property
    def sasl_plain_username(self) -> str | None: ...

    @property
    def sasl_plain_password(self) -> str | None: ...

    @property
    def sasl_password_file(self) -> str | None: ...

    @property
    def sasl_oauth_token_file(self) -> str | None: ...

    @property
    def ssl_cafile(self) -> str | None: ...

    @property
    def ssl_certfile(self) -> str | None: ...

    @property
    def ssl_keyfile(self) -> str | None: ...


def check_security(settings: SecurityFields, fail: Callable[[str, str], NoReturn]) -> None:
    """Check the security fields; ``fail(field, accepted)`` raises the one-line error."""
    protocol = settings.security_protocol
    if protocol not in SECURITY_PROTOCOLS:
        fail("security_protocol", f"one of {', '.join(SECURITY_PROTOCOLS)}")
    mechanism = settings.sasl_mechanism
    if mechanism is not None and mechanism not in SASL_MECHANISMS:
        fail("sasl_mechanism", f"one of {', '.join(SASL_MECHANISMS)}")
    sasl = protocol.startswith("SASL")
    if sasl and mechanism is None:
        fail("sasl_mechanism", "set when security_protocol is SASL_*")
    _check_files(settings, TLS_FILES, "a readable file (PEM); this one does not exist", fail)
    if not protocol.endswith("SSL") and any(getattr(settings, n) for n in TLS_FILES):
        fail("security_protocol", "SSL or SASL_SSL when an ssl_* file is given")
    if (settings.ssl_certfile is None) != (settings.ssl_keyfile is None):
        fail("ssl_keyfile", "given together with ssl_certfile (mutual TLS needs both)")
    _check_files(settings, SECRET_FILES, "a readable file; this one does not exist", fail)
    _check_writers(settings, (*SECRET_FILES, "ssl_keyfile"), fail)
    if settings.sasl_plain_password is not None and settings.sasl_password_file is not None:
        fail("sasl_password_file", "unset when sasl_plain_password is given (one source)")
    if sasl and mechanism in PASSWORD_MECHANISMS:
        if not settings.sasl_plain_username:
            fail("sasl_plain_username", f"set with sasl_mechanism {mechanism}")
        if settings.sasl_plain_password is None and settings.sasl_password_file is None:
            fail("sasl_plain_password", f"set (or sasl_password_file) with {mechanism}")
    if sasl and mechanism == "OAUTHBEARER" and settings.sasl_oauth_token_file is None:
        fail("sasl_oauth_token_file", "a file holding the access token, with OAUTHBEARER")


def _check_files(
    settings: SecurityFields,
    names: tuple[str, ...],
    accepted: str,
    fail: Callable[[str, str], NoReturn],
) -> None:
    """Fail on the first of the file settings ``names`` given that names no file."""
    for name in names:
        path = getattr(settings, name)
        if path is not None and not os.path.isfile(path):
            fail(name, accepted)


def _check_writers(
    settings: SecurityFields, names: tuple[str, ...], fail: Callable[[str, str], NoReturn]
) -> None:
    """Fail on a credential file others may write (anyone on the machine could swap the
    credentials, or the key, for their own). Others reading it is allowed: a Kubernetes
    Secret volume mounts 0644 unless its defaultMode says 0400."""
    for name in names:
        path = getattr(settings, name)
        if path is None:
            continue
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            continue  # missing: said by _check_files
        if mode & 0o022:
            fail(name, f"a file only its owner may write (0644 or stricter), not mode {mode:o}")


class FileTokenProvider(AbstractTokenProvider):
    """An OAUTHBEARER token read from a file each time a connection authenticates (an
    agent beside the process, such as a projected service-account token, rotates it)."""

    def __init__(self, path: str) -> None:
        self._path = Path(path)

    async def token(self) -> str:
        """The file's token, stripped of surrounding whitespace."""
        return (await asyncio.to_thread(self._path.read_text)).strip()


def aiokafka_options(settings: SecurityFields) -> dict[str, Any]:
    """Keyword arguments for any aiokafka client (consumer, producer, admin)."""
    options: dict[str, Any] = {"security_protocol": settings.security_protocol}
    if settings.security_protocol.startswith("SASL") and settings.sasl_mechanism:
        options["sasl_mechanism"] = settings.sasl_mechanism
        if settings.sasl_mechanism in PASSWORD_MECHANISMS:
            options["sasl_plain_username"] = settings.sasl_plain_username
            options["sasl_plain_password"] = password(settings)
        elif settings.sasl_mechanism == "OAUTHBEARER" and settings.sasl_oauth_token_file:
            options["sasl_oauth_token_provider"] = FileTokenProvider(settings.sasl_oauth_token_file)
    if settings.security_protocol.endswith("SSL"):
        from aiokafka.helpers import create_ssl_context

        options["ssl_context"] = create_ssl_context(
            cafile=settings.ssl_cafile,
            certfile=settings.ssl_certfile,
            keyfile=settings.ssl_keyfile,
        )
    return options


def librdkafka_options(settings: SecurityFields) -> dict[str, Any]:
    """The same settings as confluent-kafka (librdkafka) client properties. An OAUTHBEARER
    token file is read again at each refresh (librdkafka asks a minute before the expiry
    given here)."""
    options: dict[str, Any] = {"security.protocol": settings.security_protocol}
    if settings.security_protocol.startswith("SASL") and settings.sasl_mechanism:
        options["sasl.mechanism"] = settings.sasl_mechanism
        if settings.sasl_mechanism in PASSWORD_MECHANISMS:
            options["sasl.username"] = settings.sasl_plain_username
            options["sasl.password"] = password(settings)
        elif settings.sasl_mechanism == "OAUTHBEARER" and settings.sasl_oauth_token_file:
            token_file = Path(settings.sasl_oauth_token_file)

            def token(_config: object) -> tuple[str, float]:
                return token_file.read_text().strip(), time.time() + 120.0

            options["oauth_cb"] = token
    for field, key in (
        ("ssl_cafile", "ssl.ca.location"),
        ("ssl_certfile", "ssl.certificate.location"),
        ("ssl_keyfile", "ssl.key.location"),
    ):
        if settings.security_protocol.endswith("SSL") and getattr(settings, field):
            options[key] = getattr(settings, field)
    return options


def password(settings: SecurityFields) -> str | None:
    """The SASL password: given directly, or the first line of ``sasl_password_file``."""
    if settings.sasl_password_file is not None:
        lines = Path(settings.sasl_password_file).read_text().splitlines()
        return lines[0] if lines else ""
    return settings.sasl_plain_password
