"""Ports for local servers come from below the kernel's ephemeral range, where no other
socket is given them by the kernel between a kill and a restart."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

from contract.local_ports import LOWEST_PORT, ephemeral_range, free_port


def test_a_port_is_below_the_ephemeral_range_and_free() -> None:
    low, _ = ephemeral_range()
    port = free_port()
    assert LOWEST_PORT <= port < low
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))  # nothing holds it


def test_ports_held_by_listeners_are_not_given(tmp_path: Path) -> None:
    ten_below = tmp_path / "ip_local_port_range"
    ten_below.write_text(f"{LOWEST_PORT + 10}\t60999\n")
    candidates = range(LOWEST_PORT, LOWEST_PORT + 10)
    with contextlib.ExitStack() as stack:
        for port in candidates[:-1]:
            listener = stack.enter_context(socket.socket())
            with contextlib.suppress(OSError):  # already someone else's: held all the same
                listener.bind(("127.0.0.1", port))
                listener.listen()
        assert free_port(range_file=ten_below, given=set()) == candidates[-1]


def test_a_port_is_handed_out_once_per_process(tmp_path: Path) -> None:
    two_below = tmp_path / "ip_local_port_range"
    two_below.write_text(f"{LOWEST_PORT + 2}\t60999\n")
    given: set[int] = set()
    first = free_port(range_file=two_below, given=given)
    second = free_port(range_file=two_below, given=given)
    # Neither is bound in between, as two listeners of one node asked for before either starts.
    assert first != second
    assert given == {first, second}


def test_an_unreadable_range_is_linuxs_default(tmp_path: Path) -> None:
    garbled = tmp_path / "ip_local_port_range"
    garbled.write_text("not numbers\n")
    assert ephemeral_range(garbled) == (32768, 60999)
    assert ephemeral_range(tmp_path / "absent") == (32768, 60999)
    garbled.write_text("40000\t50000\n")
    assert ephemeral_range(garbled) == (40000, 50000)


def test_a_spark_connect_exit_names_the_logs_last_error(tmp_path: Path) -> None:
    from consumer_sdk.lake.spark_connect import SparkConnectServer

    server = SparkConnectServer(tmp_path)
    server.log_file.write_text(
        "INFO starting\nERROR SparkConnectServer: Error starting Spark Connect server\n"
        "java.io.IOException: Failed to bind to address 0.0.0.0/0.0.0.0:1\nINFO Shutdown\n"
    )
    assert server._last_error().startswith("java.io.IOException: Failed to bind")
