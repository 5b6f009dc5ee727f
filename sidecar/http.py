"""HTTP endpoints: ``/metrics`` (Prometheus text), ``/healthz``, ``/status`` (JSON).

What each shows: ``/metrics`` the figures (speeds and lags per partition, replicas,
capacity); ``/healthz`` ok, or why not, a line each; ``/status`` the whole picture (plan,
speeds, lags, decisions, problems), topology included. With a status token file, ``/status``
asks for ``Authorization: Bearer <token>`` and ``/healthz`` no longer says why it is
unhealthy (the lines name brokers and users); probes and scrapes stay open.
"""

from __future__ import annotations

import hmac
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sidecar.metrics import REGISTRY


@dataclass(frozen=True)
class Endpoints:
    """What the endpoints ask the sidecar."""

    healthy: Callable[[], bool]
    problems: Callable[[], list[str]]
    status: Callable[[], dict[str, Any]]
    token_file: str = ""
    """A file whose first line is the bearer token ``/status`` asks for (empty: none). Read
    at each request, so a rotated secret takes effect at once."""

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


def serve(host: str, port: int, endpoints: Endpoints) -> ThreadingHTTPServer:
    """Start the endpoints in a daemon thread; returns the server (``.server_port``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY))
            elif self.path == "/healthz":
                if endpoints.healthy():
                    self._send(200, "text/plain", b"ok\n")
                else:
                    lines = endpoints.problems() if endpoints.token() is None else []
                    body = "\n".join(["unhealthy", *lines, ""]).encode()
                    self._send(503, "text/plain", body)
            elif self.path == "/status":
                if endpoints.authorized(self.headers.get("Authorization")):
                    body = json.dumps(endpoints.status(), indent=1).encode()
                    self._send(200, "application/json", body)
                else:
                    self._send(401, "text/plain", b"/status needs Authorization: Bearer\n")
            else:
                self._send(404, "text/plain", b"not found: /metrics, /healthz, /status\n")

        def _send(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            if code == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="kafka-autoscaler"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return None  # scrapes every few seconds would drown the log

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="sidecar-http", daemon=True).start()
    return server
