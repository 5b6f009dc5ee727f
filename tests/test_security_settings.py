"""The security settings every Kafka client shares (contract.security): checked once for
the consumers and the sidecar, turned into aiokafka options, secrets kept out of reprs."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import pytest

from consumer_sdk.config import ConsumerConfig
from contract.security import CREDENTIAL_FIELDS, FileTokenProvider, librdkafka_options
from contract.settings import ConfigError, env_name, without_credentials
from sidecar.config import parse_args

BASE: dict[str, Any] = {
    "bootstrap_servers": "k:9093",
    "group": "g",
    "topics": ("t",),
    "capacity": 100.0,
}
SIDECAR_ARGS = ["--bootstrap-servers", "k:9093", "--group", "g", "--topics", "t"]
SIDECAR_ARGS += ["--capacity", "100", "--scaler", "none"]


def scram(**more: Any) -> dict[str, Any]:
    return {
        **BASE,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "consumer",
        **more,
    }


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (scram(), r"sasl_plain_password \(AUTOSCALER_SASL_PLAIN_PASSWORD\) must be set"),
        (
            scram(sasl_plain_username=None, sasl_plain_password="p"),
            r"sasl_plain_username .* must be set with sasl_mechanism SCRAM-SHA-512",
        ),
        (
            scram(sasl_password_file="/no/such/secret"),
            r"sasl_password_file \(AUTOSCALER_SASL_PASSWORD_FILE\) must be a readable file",
        ),
        (
            {**BASE, "security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"},
            r"sasl_oauth_token_file .* must be a file holding the access token",
        ),
        (
            {**BASE, "ssl_cafile": __file__},
            r"security_protocol .* must be SSL or SASL_SSL when an ssl_\* file is given",
        ),
        (
            {**BASE, "security_protocol": "SSL", "ssl_certfile": __file__},
            r"ssl_keyfile .* must be given together with ssl_certfile",
        ),
    ],
)
def test_bad_security_settings_name_the_field(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ConsumerConfig(**changes)


def test_the_password_never_shows_in_a_repr(tmp_path: Path) -> None:
    config = ConsumerConfig(**scram(sasl_plain_password="hunter2-secret"))
    assert "hunter2-secret" not in repr(config)
    assert config.kafka_client_options()["sasl_plain_password"] == "hunter2-secret"


def test_a_password_file_is_read_when_a_client_is_made(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("first-password\n")
    config = ConsumerConfig(**scram(sasl_password_file=str(secret)))
    assert config.kafka_client_options()["sasl_plain_password"] == "first-password"
    secret.write_text("rotated\n")
    assert config.kafka_client_options()["sasl_plain_password"] == "rotated"


def test_oauthbearer_reads_its_token_from_the_file_at_each_authentication(
    tmp_path: Path,
) -> None:
    token = tmp_path / "token"
    token.write_text("token-one\n")
    config = ConsumerConfig(
        **BASE,
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_file=str(token),
    )
    provider = config.kafka_client_options()["sasl_oauth_token_provider"]
    assert isinstance(provider, FileTokenProvider)
    assert asyncio.run(provider.token()) == "token-one"
    token.write_text("token-two")
    assert asyncio.run(provider.token()) == "token-two"


def test_tls_gives_every_client_one_ssl_context() -> None:
    config = ConsumerConfig(**BASE, security_protocol="SSL")
    options = config.kafka_client_options()
    assert options["security_protocol"] == "SSL"
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].verify_mode == ssl.CERT_REQUIRED


def test_share_members_get_the_same_settings_as_librdkafka_properties(tmp_path: Path) -> None:
    secret, token = tmp_path / "password", tmp_path / "token"
    secret.write_text("pw\n")
    token.write_text("token-one\n")
    tls = {"ssl_cafile": __file__, "ssl_certfile": __file__, "ssl_keyfile": __file__}
    options = librdkafka_options(
        ConsumerConfig(**scram(security_protocol="SASL_SSL", sasl_password_file=str(secret), **tls))
    )
    assert options == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "consumer",
        "sasl.password": "pw",
        "ssl.ca.location": __file__,
        "ssl.certificate.location": __file__,
        "ssl.key.location": __file__,
    }
    oauth = ConsumerConfig(
        **BASE,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_file=str(token),
    )
    refresh = librdkafka_options(oauth)["oauth_cb"]
    assert refresh("")[0] == "token-one"
    token.write_text("token-two")
    assert refresh("")[0] == "token-two" and refresh("")[1] > 0
    assert librdkafka_options(ConsumerConfig(**BASE)) == {"security.protocol": "PLAINTEXT"}


def test_the_sidecar_takes_the_same_settings_from_flags_and_variables(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    config = parse_args(
        [*SIDECAR_ARGS, "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN"],
        {
            "AUTOSCALER_SASL_PLAIN_USERNAME": "sidecar",
            "AUTOSCALER_SASL_PASSWORD_FILE": str(secret),
        },
    )
    assert config.kafka_client_options() == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "sidecar",
        "sasl_plain_password": "s3cret",
    }
    # A consumer the local scaler starts gets the protocol, not the sidecar's identity:
    # with the sidecar's principal it could write the speeds topic.
    environment = config.shared_environment()
    assert environment["AUTOSCALER_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
    assert environment["AUTOSCALER_SASL_MECHANISM"] == "PLAIN"
    assert "AUTOSCALER_SASL_PASSWORD_FILE" not in environment
    assert "AUTOSCALER_SASL_PLAIN_USERNAME" not in environment
    assert "AUTOSCALER_SSL_CAFILE" not in environment  # unset stays unset


def test_the_sidecar_hands_no_credential_variable_down() -> None:
    inherited = {
        "PATH": "/usr/bin",
        "AUTOSCALER_GROUP": "g",
        **{env_name(name): "secret" for name in CREDENTIAL_FIELDS},
    }
    assert without_credentials(inherited) == {"PATH": "/usr/bin", "AUTOSCALER_GROUP": "g"}


def test_a_bad_sidecar_security_flag_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([*SIDECAR_ARGS, "--security-protocol", "TLS"], {})
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--security-protocol (AUTOSCALER_SECURITY_PROTOCOL) must be one of" in error
    assert "SASL_SSL" in error and "Traceback" not in error


def test_the_sidecar_reads_a_rotated_password_at_its_next_connection_attempt(
    tmp_path: Path,
) -> None:
    from sidecar.app import Sidecar

    secret = tmp_path / "password"
    secret.write_text("first\n")
    config = parse_args(
        [*SIDECAR_ARGS, "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN"],
        {"AUTOSCALER_SASL_PLAIN_USERNAME": "sidecar", "AUTOSCALER_SASL_PASSWORD_FILE": str(secret)},
    )
    sidecar = Sidecar(config, None, None)

    async def attempt() -> None:
        with pytest.raises(Exception):  # noqa: B017  nothing listens at k:9093
            await asyncio.wait_for(sidecar.start(), 5)
        await sidecar.stop()

    secret.write_text("rotated\n")  # the Secret changed while Kafka refused "first"
    asyncio.run(attempt())
    assert sidecar.client_options["sasl_plain_password"] == "rotated"
    assert sidecar.monitor._options["sasl_plain_password"] == "rotated"
    assert sidecar.publisher._options["sasl_plain_password"] == "rotated"
    secret.unlink()  # mid-rotation: the file is briefly gone; what was read is kept
    asyncio.run(attempt())
    assert sidecar.client_options["sasl_plain_password"] == "rotated"


def test_a_password_is_refused_as_a_sidecar_flag_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from sidecar.config import parse_args

    base = ["--bootstrap-servers", "b:9092", "--group", "g", "--topics", "t", "--capacity", "1"]
    with pytest.raises(SystemExit) as exited:
        parse_args([*base, "--sasl-plain-password", "hunter2"], {})
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "a secret on the command line shows in the process list" in error
    assert "hunter2" not in error
    # The variable is where it belongs.
    config = parse_args(base, {"AUTOSCALER_SASL_PLAIN_PASSWORD": "hunter2"})
    assert config.sasl_plain_password == "hunter2"


def test_a_credential_file_others_may_write_is_refused_naming_it(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("p\n")
    secret.chmod(0o644)  # as a Secret volume mounts it: others may read, not write
    assert ConsumerConfig(**scram(sasl_password_file=str(secret))).sasl_password_file
    secret.chmod(0o666)
    with pytest.raises(ConfigError, match=r"sasl_password_file .* not mode 666"):
        ConsumerConfig(**scram(sasl_password_file=str(secret)))
