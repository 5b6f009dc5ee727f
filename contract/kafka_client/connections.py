"""One connection to one Kafka server, opened with the clients' settings and closed: whether
the server takes them (TLS, SASL), and if not, aiokafka's error saying why."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any


async def probe(host: str, port: int, options: Mapping[str, Any], timeout_s: float) -> None:
    """Connect to ``host:port`` with aiokafka's connection ``options`` (security, as the
    clients pass them) and close again; raises ``OSError``, aiokafka's ``KafkaError`` or
    ``TimeoutError`` when the server does not take the connection."""
    from aiokafka.conn import create_conn

    connection = await asyncio.wait_for(
        create_conn(host, port, request_timeout_ms=int(timeout_s * 1000), **options), timeout_s
    )
    connection.close()
