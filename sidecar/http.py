"""HTTP endpoints: ``/metrics`` (Prometheus text), ``/healthz``, ``/livez``, ``/status`` (JSON).

What each shows: ``/metrics`` the figures (speeds and lags per partition, replicas,
capacity); ``/healthz`` ok, or why not, a line each (for a readiness probe and people; "degraded"
with a line each, still 200, while the consumers asked for are not joining);
``/livez`` the same for what a restart cures alone, a stuck loop (a liveness probe: Kafka
out of reach would otherwise restart every sidecar until it is back); ``/status`` the whole
picture (plan, speeds, lags, decisions, problems), topology included. With a status token
file, ``/status`` asks for ``Authorization: Bearer <token>`` and ``/healthz`` and ``/livez``
no longer say why (the lines name brokers and users); probes and scrapes stay open. Without
one, on an address other than loopback, ``/status`` is refused (403, one line saying why)
and the probes do not say why either, unless ``--status-open`` asks for them open.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import Any

from contract.http_routes import (
    Response,
    RouteServer,
    health_route,
    metrics_route,
    serve_routes,
    text,
)
from sidecar.metrics import REGISTRY


@dataclass(frozen=True)
class Endpoints:
    """What the endpoints ask the sidecar."""

    problems: Callable[[], list[str]]
    """Why ``/healthz`` fails, a line each (none: healthy)."""
    status: Callable[[], dict[str, Any]]
    token_file: str = ""
    """A file whose first line is the bearer token ``/status`` asks for (empty: none). Read
    at each request, so a rotated secret takes effect at once."""
    liveness: Callable[[], list[str]] = list
    """Why ``/livez`` fails, a line each: only what a restart cures (a stuck loop)."""
    degraded: Callable[[], list[str]] = list
    """What ``/healthz`` shows while it passes ("degraded"): consumers not joining."""
    closed: str | None = None
    """Why ``/status`` is refused to everyone (no token file on a non-loopback address, and
    not told to serve it open); None: open, or guarded by the token."""

    def token(self) -> str | None:
        """The token ``/status`` asks for, None when open. An unreadable or empty file
        gives a token nobody holds (closed, not open)."""
        if not self.token_file:
            return None
        try:
            lines = Path(self.token_file).read_text().splitlines()
        except OSError:
            return ""
        return lines[0].strip() if lines else ""

    def explains(self) -> bool:
        """Whether ``/healthz`` and ``/livez`` say why (not when ``/status`` is guarded)."""
        return self.closed is None and self.token() is None

    def authorized(self, header: str | None) -> bool:
        """Whether an Authorization header may read ``/status``."""
        wanted = self.token()
        if wanted is None:
            return self.closed is None
        given = (header or "").removeprefix("Bearer ").strip()
        return bool(wanted) and hmac.compare_digest(given.encode(), wanted.encode())


def serve(host: str, port: int, endpoints: Endpoints) -> RouteServer:
    """Start the endpoints in a daemon thread; returns the server (``.server_port``)."""

    def status(headers: Message[str, str]) -> Response:
        if endpoints.closed is not None:
            return text(403, f"{endpoints.closed}\n")
        if not endpoints.authorized(headers.get("Authorization")):
            challenge = ("WWW-Authenticate", 'Bearer realm="kafka-autoscaler"')
            return text(401, "/status needs Authorization: Bearer\n", challenge)
        body = json.dumps(endpoints.status(), indent=1).encode()
        return Response(200, "application/json", body)

    routes = {
        "/metrics": metrics_route(REGISTRY),
        "/healthz": health_route(endpoints.problems, endpoints.explains, endpoints.degraded),
        "/livez": health_route(endpoints.liveness, endpoints.explains),
        "/status": status,
    }
    return serve_routes(host, port, routes, "sidecar-http")
