"""The processes' small HTTP server (contract.http_routes): idle and hostile connections do
not keep probes out, bad requests get one line, a failing route does not end the server."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from email.message import Message

import pytest

from contract import http_routes
from contract.http_routes import RouteServer, health_route, serve_routes, text


def failing_route(_headers: Message[str, str]) -> http_routes.Response:
    raise RuntimeError("a bug in one route")


@pytest.fixture
def server() -> Iterator[RouteServer]:
    routes = {
        "/healthz": health_route(list, lambda: True),
        "/echo": lambda headers: text(200, f"{headers.get('x-probe')}\n"),
        "/broken": failing_route,
    }
    started = serve_routes("127.0.0.1", 0, routes, "test-http")
    try:
        yield started
    finally:
        started.shutdown()


def exchange(port: int, request: bytes) -> bytes:
    """What the server answers ``request`` with, read to the connection's end."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request)
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_probe_gets_in_past_hundreds_of_idle_connections(server: RouteServer) -> None:
    idle = [socket.create_connection(("127.0.0.1", server.server_port)) for _ in range(500)]
    try:
        url = f"http://127.0.0.1:{server.server_port}/healthz"
        with urllib.request.urlopen(url, timeout=5) as answer:
            assert (answer.status, answer.read()) == (200, b"ok\n")
        # Beyond the cap the longest-waiting idle connections were closed to make room.
        for connection in idle[:100]:
            connection.settimeout(10)
            assert connection.recv(1) == b""
    finally:
        for connection in idle:
            connection.close()


def test_an_idle_connection_is_closed_after_the_read_timeout(
    server: RouteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_routes, "READ_TIMEOUT_S", 0.2)
    with socket.create_connection(("127.0.0.1", server.server_port), timeout=10) as connection:
        connection.sendall(b"GET /healthz HTTP/1.1\r\n")  # and never the rest
        assert connection.recv(1) == b""


def test_bad_requests_get_one_line_and_headers_are_read_without_case(
    server: RouteServer,
) -> None:
    port = server.server_port
    answer = exchange(port, b"GET /echo HTTP/1.1\r\nX-PROBE: kubelet\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nkubelet\n")
    assert exchange(port, b"POST /healthz HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405 ")
    assert exchange(port, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    head = exchange(port, b"HEAD /healthz HTTP/1.1\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")  # no body
    assert b"not found: /healthz, /echo, /broken" in exchange(port, b"GET /x HTTP/1.1\r\n\r\n")
    # A head longer than the limit is not read to its end: the connection just closes.
    flood = b"GET /healthz HTTP/1.1\r\nX: " + b"a" * (2 * http_routes.MAX_HEAD_BYTES)
    assert exchange(port, flood + b"\r\n\r\n") == b""


def test_a_failing_route_is_a_500_and_the_server_goes_on(server: RouteServer) -> None:
    port = server.server_port
    assert exchange(port, b"GET /broken HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 500 ")
    with pytest.raises(urllib.error.HTTPError) as failed:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/broken", timeout=5)
    assert failed.value.read() == b"/broken failed: RuntimeError\n"
    assert exchange(port, b"GET /healthz HTTP/1.1\r\n\r\n").endswith(b"ok\n")


def test_an_address_in_use_is_an_oserror_at_once(server: RouteServer) -> None:
    with pytest.raises(OSError):
        serve_routes("127.0.0.1", server.server_port, {}, "second")
