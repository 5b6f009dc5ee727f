"""HTTP endpoints: ``/metrics`` (Prometheus text), ``/healthz``, ``/status`` (JSON)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sidecar.metrics import REGISTRY


def serve(
    host: str, port: int, healthy: Callable[[], bool], status: Callable[[], dict[str, Any]]
) -> ThreadingHTTPServer:
    """Start the endpoints in a daemon thread; returns the server (``.server_port``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY))
            elif self.path == "/healthz":
                ok = healthy()
                self._send(200 if ok else 503, "text/plain", b"ok\n" if ok else b"stale\n")
            elif self.path == "/status":
                body = json.dumps(status(), indent=1).encode()
                self._send(200, "application/json", body)
            else:
                self._send(404, "text/plain", b"not found: /metrics, /healthz, /status\n")

        def _send(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return None  # scrapes every few seconds would drown the log

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="sidecar-http", daemon=True).start()
    return server
