"""Ports for the local servers (Kafka nodes, Spark Connect, the control plane) that tests,
benchmarks and the demo start on 127.0.0.1.

A server restarted on its port (a fault test's kill -9 and restart) finds it taken now and
then when the port came from the kernel's ephemeral range: between the kill and the new bind
any outgoing connection or ``bind(0)`` on the machine may be given it, the new server's own
first. Spark Connect then exits at once (``spark.connect.grpc.port.maxRetries`` is 0). The
kernel hands out no port below that range by itself, so these ports are drawn from there."""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000  # below: the well-known and registered ports services commonly take
_draws = random.Random()
# Two servers of one process (two listeners of one Kafka node) asked for ports before either
# binds would otherwise be able to draw the same free port.
_given_in_this_process: set[int] = set()


def ephemeral_range(source: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range; Linux's default when the file cannot be read."""
    try:
        low, high = (int(part) for part in source.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port(
    attempts: int = 200,
    range_file: Path = EPHEMERAL_RANGE_FILE,
    given: set[int] | None = None,
) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, that this process has not handed
    out before (``given``: the process's own record unless another is passed) and that the
    kernel will not give to another socket by itself: below the ephemeral range when there is
    room there, else any."""
    handed_out = _given_in_this_process if given is None else given
    low, _ = ephemeral_range(range_file)
    if low > LOWEST_PORT:
        for _ in range(attempts):
            port = _draws.randrange(LOWEST_PORT, low)
            if port not in handed_out and _bindable(port):
                handed_out.add(port)
                return port
    for _ in range(attempts):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            chosen: int = probe.getsockname()[1]
        if chosen not in handed_out:
            handed_out.add(chosen)
            return chosen
    raise OSError("no free TCP port on 127.0.0.1 that this process has not handed out")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
