"""The embedded broker hosted in a child process, driven through its stdin control channel.

Several processes can only share a mock cluster that lives in a process of its own (see
README "Embedded broker"); this proxy starts one and offers the same methods as
:class:`local_kafka.embedded.EmbeddedKafka`.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Self

from local_kafka.embedded import BrokerHandle, EmbeddedKafkaError, check_new_topic

_START_TIMEOUT_S = 30.0


class EmbeddedKafkaProcess(BrokerHandle):
    """An embedded broker in a child process (``python -m local_kafka.broker_cli --control``)."""

    def __init__(self, brokers: int = 3) -> None:
        if not isinstance(brokers, int) or not 1 <= brokers <= 64:
            raise ValueError(f"brokers must be an integer in [1, 64], got {brokers!r}")
        self.brokers = brokers
        self._process: subprocess.Popen[str] | None = None
        self._bootstrap = None
        self._lock = threading.Lock()

    def start(self) -> Self:
        """Start the child and wait for its bootstrap string; idempotent."""
        if self._process is not None:
            return self
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "local_kafka.broker_cli",
                "--control",
                "--brokers",
                str(self.brokers),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert process.stdout is not None
        line = _read_line(process, _START_TIMEOUT_S)
        if not line or ":" not in line:
            process.kill()
            raise EmbeddedKafkaError(f"embedded broker did not start (said {line!r})")
        self._process, self._bootstrap = process, line
        return self

    def stop(self) -> None:
        """Close the control channel (the child stops at EOF) and wait for it."""
        process, self._process, self._bootstrap = self._process, None, None
        if process is None:
            return
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    @property
    def pid(self) -> int:
        """Process id of the child hosting the cluster."""
        if self._process is None:
            raise EmbeddedKafkaError("the embedded broker is not started: call start() first")
        return self._process.pid

    def _command(self, *words: object) -> None:
        if self._process is None:
            raise EmbeddedKafkaError("the embedded broker is not started: call start() first")
        assert self._process.stdin is not None
        with self._lock:
            self._process.stdin.write(" ".join(str(w) for w in words) + "\n")
            self._process.stdin.flush()
            reply = _read_line(self._process, _START_TIMEOUT_S)
        if reply.startswith("error "):
            message = reply.removeprefix("error ")
            # Argument errors keep their type so callers see the same errors in- and out-of-process.
            if " must " in message:
                raise ValueError(message)
            raise EmbeddedKafkaError(message)
        if reply != "ok":
            raise EmbeddedKafkaError(f"unexpected reply from embedded broker: {reply!r}")

    def create_topic(self, name: str, partitions: int, replication: int = 1) -> None:
        """Create a topic in the child's cluster."""
        check_new_topic(name, partitions, replication, self.brokers)
        self._command("create_topic", name, partitions, replication)

    def broker_down(self, broker_id: int) -> None:
        """Take a broker of the child's cluster down."""
        self._command("broker_down", broker_id)

    def broker_up(self, broker_id: int) -> None:
        """Bring a broker of the child's cluster back up."""
        self._command("broker_up", broker_id)

    def set_rtt(self, broker_id: int, ms: int) -> None:
        """Delay a broker's responses by ``ms`` milliseconds."""
        self._command("set_rtt", broker_id, ms)

    def push_request_errors(self, api_key: int, errors: Sequence[int]) -> None:
        """Fail the next requests of ``api_key`` with ``errors``."""
        if not errors:
            raise ValueError("errors must hold at least one Kafka error code")
        self._command("push_request_errors", api_key, *errors)


def _read_line(process: subprocess.Popen[str], timeout_s: float) -> str:
    """Read one line from the child's stdout, failing if it takes longer than ``timeout_s``."""
    assert process.stdout is not None
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(process.stdout.readline()))  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout_s)
    if reader.is_alive() or not result:
        raise EmbeddedKafkaError(
            f"embedded broker (pid {process.pid}) did not answer in {timeout_s}s"
        )
    return result[0].strip()
