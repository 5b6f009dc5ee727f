"""The sidecar's HTTP endpoints: /healthz says why it is unhealthy; /status may ask for a
bearer token (read from a file at each request), and then /healthz keeps its reasons."""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.config import parse_args
from sidecar.http import Endpoints, serve

REASONS = ["cannot reach Kafka at broker-1:9093: connection refused"]
BASE_ARGS = ["--bootstrap-servers", "b:9092", "--group", "g", "--topics", "t", "--capacity", "1"]


def get(url: str, token: str | None = None) -> tuple[int, str]:
    """The response's status and body (an error status too)."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    token = tmp_path / "token"
    endpoints = Endpoints(
        problems=lambda: list(REASONS),
        status=lambda: {"group": "g"},
        token_file=str(token),
        liveness=lambda: ["the sidecar's loop has not moved for 200 s (limit 120 s)"],
    )
    server = serve("127.0.0.1", 0, endpoints)
    try:
        yield f"http://127.0.0.1:{server.server_port}", token
    finally:
        server.shutdown()


def test_status_asks_for_the_token_in_the_file(serving: tuple[str, Path]) -> None:
    base, token = serving
    token.write_text("first-token\n")
    assert get(base + "/status")[0] == 401
    assert get(base + "/status", "wrong")[0] == 401
    assert get(base + "/status", "first-token") == (200, '{\n "group": "g"\n}')
    token.write_text("rotated\n")  # read at each request
    assert get(base + "/status", "first-token")[0] == 401
    assert get(base + "/status", "rotated")[0] == 200
    token.unlink()  # a token file gone closes /status, it does not open it
    assert get(base + "/status", "rotated")[0] == 401
    assert get(base + "/status", "")[0] == 401
    # Probes and scrapes need no token; /healthz keeps the reasons to /status's readers.
    assert get(base + "/healthz") == (503, "unhealthy\n")
    assert get(base + "/livez") == (503, "unhealthy\n")
    assert get(base + "/metrics")[0] == 200


def test_the_token_header_is_read_whatever_its_case(serving: tuple[str, Path]) -> None:
    base, token = serving
    token.write_text("the-token\n")
    connection = http.client.HTTPConnection(base.removeprefix("http://"), timeout=5)
    try:
        connection.request("GET", "/status", headers={"authorization": "Bearer the-token"})
        assert connection.getresponse().status == 200  # header names have no case in HTTP
    finally:
        connection.close()


def test_without_a_token_status_is_open_and_healthz_says_why() -> None:
    endpoints = Endpoints(lambda: list(REASONS), lambda: {"group": "g"})
    server = serve("127.0.0.1", 0, endpoints)
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        assert get(base + "/status")[0] == 200
        assert get(base + "/healthz") == (503, "\n".join(["unhealthy", *REASONS, ""]))
        assert get(base + "/livez") == (200, "ok\n")  # nothing stuck: Kafka is the problem
    finally:
        server.shutdown()


@pytest.mark.parametrize("content", [None, "", "\n"])
def test_a_token_file_without_a_token_is_one_line(
    tmp_path: Path, content: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit):
        parse_args([*BASE_ARGS, "--status-token-file", str(path)], {})
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--status-token-file (AUTOSCALER_STATUS_TOKEN_FILE) must be a readable file" in error


def test_off_loopback_without_a_token_status_is_closed_and_says_how_to_open_it() -> None:
    closed = parse_args([*BASE_ARGS, "--http-host", "0.0.0.0"], {})
    assert closed.status_closed
    assert not parse_args([*BASE_ARGS, "--http-host", "::1"], {}).status_closed
    assert not parse_args([*BASE_ARGS, "--http-host", "localhost"], {}).status_closed
    opened = parse_args([*BASE_ARGS, "--http-host", "0.0.0.0"], {"AUTOSCALER_STATUS_OPEN": "true"})
    assert opened.status_open and not opened.status_closed
    line = "/status is closed: no token on a non-loopback address"
    endpoints = Endpoints(lambda: list(REASONS), lambda: {"group": "g"}, closed=line)
    server = serve("127.0.0.1", 0, endpoints)
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        assert get(base + "/status") == (403, line + "\n")
        assert get(base + "/healthz") == (503, "unhealthy\n")  # the reasons name brokers
        assert get(base + "/metrics")[0] == 200  # scrapes and probes stay open
    finally:
        server.shutdown()


def test_a_flag_that_is_not_true_or_false_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args([*BASE_ARGS, "--status-open", "yes please"], {})
    assert exited.value.code == 2
    assert "--status-open (AUTOSCALER_STATUS_OPEN) must be true or false, got 'yes please'" in (
        capsys.readouterr().err
    )
