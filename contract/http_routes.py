"""A small HTTP server for the processes' own endpoints (``/metrics``, ``/healthz``, ...):
each path answered by a function of the request's headers, from a thread of its own, so the
answers come even while the process's event loop is busy or wedged.

Connections are coroutines of the server's own event loop, so an idle one costs no thread:
a client that connects and sends nothing (hundreds of them, a port scan, a slow proxy) is
closed after :data:`READ_TIMEOUT_S`, and beyond :data:`MAX_CONNECTIONS` the longest-waiting
connection that has not sent its request yet is closed to make room, so a probe always gets
in. A request's head is at most :data:`MAX_HEAD_BYTES`; one request per connection. Routes
run in a small pool of threads: a slow ``/status`` does not hold ``/healthz`` back.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import io
import logging
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.message import Message
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 5.0  # for a request's head, and for the answer to be taken
MAX_CONNECTIONS = 128  # open at once; beyond it the oldest still sending nothing goes
MAX_HEAD_BYTES = 16 * 1024  # request line and headers
ROUTE_THREADS = 4


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


def encode(answer: Response, *, head_only: bool = False) -> bytes:
    """``answer`` as HTTP/1.1 bytes, closing the connection after it."""
    try:
        reason = HTTPStatus(answer.code).phrase
    except ValueError:
        reason = ""
    lines = [
        f"HTTP/1.1 {answer.code} {reason}",
        f"Content-Type: {answer.content_type}",
        f"Content-Length: {len(answer.body)}",
        "Connection: close",
        *(f"{key}: {value}" for key, value in answer.headers),
    ]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + answer.body


def parse_head(head: bytes) -> tuple[str, str, Message[str, str]]:
    """Method, path and headers of a request's head (ending in a blank line); ValueError
    when it is not one."""
    request_line, _, rest = head.partition(b"\r\n")
    words = request_line.decode("latin-1").split()
    if len(words) != 3 or not words[2].startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x request line: {request_line[:80]!r}")
    try:
        headers = http.client.parse_headers(io.BytesIO(rest))
    except http.client.HTTPException as exc:
        raise ValueError(f"bad headers: {exc}") from None
    return words[0], words[1], headers


class RouteServer:
    """Answers GET ``routes`` on a listening socket from a daemon thread (see the module
    docstring); ``server_port`` is the port it listens on."""

    def __init__(self, listener: socket.socket, routes: Mapping[str, Route], name: str) -> None:
        self.server_port: int = listener.getsockname()[1]
        self._routes = dict(routes)
        self._known = ", ".join(routes)
        self._pool = ThreadPoolExecutor(ROUTE_THREADS, thread_name_prefix=name)
        self._loop = asyncio.new_event_loop()
        # Connections still sending their request, oldest first (the ones to close first).
        self._waiting: OrderedDict[int, asyncio.StreamWriter] = OrderedDict()
        self._open = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(listener,), name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self, listener: socket.socket) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, sock=listener, limit=MAX_HEAD_BYTES)
        )
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            for writer in list(self._waiting.values()):
                writer.close()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

    def shutdown(self) -> None:
        """Stop listening and answering (open connections are dropped)."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(READ_TIMEOUT_S)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _make_room(self) -> None:
        """At :data:`MAX_CONNECTIONS`, close the longest-waiting connection still sending
        nothing (an idle one cannot keep a probe out)."""
        if self._open >= MAX_CONNECTIONS and self._waiting:
            _, oldest = self._waiting.popitem(last=False)
            oldest.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._make_room()
        self._open += 1
        key = id(writer)
        self._waiting[key] = writer
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            finally:
                self._waiting.pop(key, None)
            answer, head_only = await self._answer(head)
            writer.write(encode(answer, head_only=head_only))
            await asyncio.wait_for(writer.drain(), READ_TIMEOUT_S)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass  # idle, cut, or a head too long: the connection just closes
        finally:
            self._open -= 1
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _answer(self, head: bytes) -> tuple[Response, bool]:
        try:
            method, path, headers = parse_head(head)
        except ValueError as exc:
            return text(400, f"bad request: {exc}\n"), False
        if method not in ("GET", "HEAD"):
            return text(405, "only GET\n", ("Allow", "GET, HEAD")), False
        route = self._routes.get(path)
        if route is None:
            return text(404, f"not found: {self._known}\n"), method == "HEAD"
        try:
            answer = await self._loop.run_in_executor(self._pool, route, headers)
        except Exception as exc:  # one route's bug must not end the server
            log.exception("%s failed: %r", path, exc)
            return text(500, f"{path} failed: {type(exc).__name__}\n"), False
        return answer, method == "HEAD"


def serve_routes(host: str, port: int, routes: Mapping[str, Route], name: str) -> RouteServer:
    """Answer GET ``routes`` on ``host:port`` (``""``: every interface) from a daemon thread
    called ``name`` (any other path: 404 listing them); returns the server
    (``.server_port``). OSError when the address cannot be listened on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server((host, port), family=family, backlog=MAX_CONNECTIONS)
    return RouteServer(listener, routes, name)
