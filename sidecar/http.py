"""HTTP endpoints: ``/metrics`` (Prometheus text), ``/healthz``, ``/livez``, ``/status`` (JSON).

What each shows: ``/metrics`` the figures (speeds and lags per partition, replicas,
capacity); ``/healthz`` ok, or why not, a line each (for a readiness probe and people; "degraded"
with a line each, still 200, while the consumers asked for are not joining);
``/livez`` the same for what a restart cures alone, a stuck loop (a liveness probe: Kafka
out of reach would otherwise restart every sidecar until it is back); ``/status`` the whole
picture (plan, speeds, lags, decisions, problems), topology included. With a status token
file, ``/status`` asks for ``Authorization: Bearer <token>`` and ``/healthz`` and ``/livez``
no longer say why (the lines name brokers and users); probes and scrapes stay open.
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

    def authorized(self, header: str | None) -> bool:
        """Whether an Authorization header may read ``/status``."""
        wanted = self.token()
        if wanted is None:
            return True
        given = (header or "").removeprefix("Bearer ").strip()
        return bool(wanted) and hmac.compare_digest(given.encode(), wanted.encode())


def serve(host: str, port: int, endpoints: Endpoints) -> RouteServer:
    """Start the endpoints in a daemon thread; returns the server (``.server_port``)."""

    def status(headers: Message[str, str]) -> Response:
        if not endpoints.authorized(headers.get("Authorization")):
            challenge = ("WWW-Authenticate", 'Bearer realm="kafka-autoscaler"')
            return text(401, "/status needs Authorization: Bearer\n", challenge)
        body = json.dumps(endpoints.status(), indent=1).encode()
        return Response(200, "application/json", body)

    routes = {
        "/metrics": metrics_route(REGISTRY),
        "/healthz": health_route(
            endpoints.problems, lambda: endpoints.token() is None, endpoints.degraded
        ),
        "/livez": health_route(endpoints.liveness, lambda: endpoints.token() is None),
        "/status": status,
    }
    return serve_routes(host, port, routes, "sidecar-http")
