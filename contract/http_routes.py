"""A small HTTP server for the processes' own endpoints (``/metrics``, ``/healthz``, ...):
each path answered by a function of the request's headers, from a daemon thread, so the
answers come even while the process's event loop is busy or wedged."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


@dataclass(frozen=True)
class Response:
    """What one request gets."""

    code: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


# A route reads the request's headers as the server parsed them: ``get`` ignores case, as
# HTTP header names do (a proxy may send ``authorization``).
Route = Callable[["Message[str, str]"], Response]


def text(code: int, body: str, *headers: tuple[str, str]) -> Response:
    """A plain-text answer."""
    return Response(code, "text/plain", body.encode(), headers)


def metrics_route(registry: CollectorRegistry) -> Route:
    """``/metrics``: the registry in Prometheus' text format."""
    return lambda _headers: Response(200, CONTENT_TYPE_LATEST, generate_latest(registry))


def health_route(
    problems: Callable[[], list[str]],
    explain: Callable[[], bool],
    degraded: Callable[[], list[str]] = list,
) -> Route:
    """``/healthz``: ``ok`` (200); ``degraded`` (200: a probe passes) with a line per
    ``degraded()`` reason; or ``unhealthy`` (503) with a line per problem. The lines only
    when ``explain()`` (they may name brokers and users)."""

    def answer(_headers: Message[str, str]) -> Response:
        found = problems()
        if found:
            return text(503, "\n".join(["unhealthy", *(found if explain() else []), ""]))
        warnings = degraded()
        if warnings:
            return text(200, "\n".join(["degraded", *(warnings if explain() else []), ""]))
        return text(200, "ok\n")

    return answer


def serve_routes(
    host: str, port: int, routes: Mapping[str, Route], name: str
) -> ThreadingHTTPServer:
    """Answer GET ``routes`` on ``host:port`` from a daemon thread called ``name`` (any
    other path: 404 listing them); returns the server (``.server_port``)."""
    known = ", ".join(routes)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = routes.get(self.path)
            answer = text(404, f"not found: {known}\n") if route is None else route(self.headers)
            self.send_response(answer.code)
            self.send_header("Content-Type", answer.content_type)
            for key, value in answer.headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, format: str, *args: Any) -> None:
            return None  # scrapes and probes every few seconds would drown the log

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server
