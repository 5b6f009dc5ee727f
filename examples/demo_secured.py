"""``make demo`` on a secured cluster (``--kafka apache --secured``): SASL_SSL with SCRAM,
certificates made for the run, and ACLs by which the sidecar alone may write the speeds
topic. The sidecar and the consumers authenticate as two users; the demo's load producer
and its topic set-up use the cluster's PLAINTEXT listener, the harness's own door."""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from local_kafka.apache_kafka import ApacheKafka
from local_kafka.secured import Certificates, SecuredListeners, grant_group, scram_environment

USERS = ("sidecar", "consumer")


@dataclass(frozen=True)
class SecuredDemo:
    """The run's certificates, users and their password files."""

    listeners: SecuredListeners
    password_files: dict[str, Path]

    @classmethod
    def make(cls, directory: Path) -> SecuredDemo:
        """A CA, the brokers' certificate and a random password per user, under
        ``directory`` (the password files readable by their owner only)."""
        certificates = Certificates.make(directory)
        passwords = {user: secrets.token_urlsafe(18) for user in USERS}
        files = {}
        for user, password in passwords.items():
            path = directory / f"{user}.password"
            path.touch(mode=0o600)
            path.write_text(password + "\n")
            files[user] = path
        return cls(SecuredListeners(certificates, passwords), files)

    def environment(self, apache: ApacheKafka, user: str) -> dict[str, str]:
        """``user``'s ``AUTOSCALER_*`` security variables on the SASL_SSL listeners."""
        return scram_environment(
            apache.sasl_bootstrap_servers,
            self.listeners.certificates,
            user,
            self.password_files[user],
        )

    def grant(self, apache: ApacheKafka, group: str, topics: Sequence[str], speeds: str) -> None:
        """The ACLs of docs/security.md for the demo's group."""
        grant_group(apache.admin_client(), group=group, topics=topics, speeds=speeds)

    def consumer_command(self, apache: ApacheKafka, command: str) -> str:
        """``command`` run as the consumer user: the sidecar hands its consumers no
        credentials of its own, so the command names them (``env NAME=value ...``)."""
        own = self.environment(apache, "consumer")
        names = ("AUTOSCALER_SASL_PLAIN_USERNAME", "AUTOSCALER_SASL_PASSWORD_FILE")
        return " ".join(["env", *(shlex.quote(f"{n}={own[n]}") for n in names), command])
