"""The sidecar CLI with the local scaler and real consumer processes, under load."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from contract.local_ports import free_port
from local_kafka.processes import processes_mentioning
from tests.sdk_helpers import (
    local_sidecar_env,
    stop_sidecar_process,
    wait_until,
)
from tests.sdk_helpers import sidecar_status as status

ROOT = Path(__file__).parent.parent


def consumers_running(folder: Path) -> list[int]:
    """Pids of live processes whose command line mentions ``folder``."""
    return list(processes_mentioning(str(folder)))


def rows(folder: Path) -> dict[str, set[tuple[int, int]]]:
    """(partition, offset) of every complete line per consumer's file. A consumer still
    writing can have a line half written (a batch reaches the file in several writes): the
    text after the last newline is not a record yet."""
    found: dict[str, set[tuple[int, int]]] = {}
    for path in folder.glob("*.jsonl"):
        complete = path.read_text().split("\n")[:-1]
        found[path.stem] = {(r["partition"], r["offset"]) for r in map(json.loads, complete)}
    return found


def test_sidecar_scales_real_consumers_and_nothing_is_lost(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(4)
    port = free_port()
    out = tmp_path / "out"
    out.mkdir()
    consumer = (
        f"{shlex.quote(sys.executable)} -m consumer_sdk.cli --sink jsonl:{out}/{{identity}}.jsonl"
    )
    env = local_sidecar_env(
        kafka,
        topic,
        topic_factory(1, prefix="speeds"),
        consumer,
        http_port=port,
        lock_file=str(tmp_path / "lock"),
        capacity=400,  # records/s per consumer
        max_replicas=4,
    )
    produced: set[tuple[int, int]] = set()
    stop_producing = threading.Event()

    def delivered(err: object, msg: Any) -> None:
        if err is None:
            produced.add((int(msg.partition()), int(msg.offset())))

    def load() -> None:  # about 1,000 records/s over 4 partitions, until told to stop
        producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
        sent = 0
        while not stop_producing.is_set() and sent < 60_000:
            for partition in range(4):
                for _ in range(25):
                    producer.produce(
                        topic, value=b"x" * 100, partition=partition, on_delivery=delivered
                    )
            sent += 100
            producer.poll(0)
            stop_producing.wait(0.1)
        assert producer.flush(30) == 0

    sidecar = subprocess.Popen([sys.executable, "-m", "sidecar.cli"], env=env, cwd=ROOT)
    loader = threading.Thread(target=load)
    loader.start()
    try:
        # 1,000 records/s at 400 per consumer: at least 3 consumers.
        assert wait_until(lambda: (status(port).get("replicas") or 0) >= 3, timeout_s=90)
        assert wait_until(lambda: len(rows(out)) >= 3, timeout_s=60)
        # Their offset commits carry their capacity reports, and the sidecar reads them.
        assert wait_until(lambda: status(port)["capacity"]["members_reading"] >= 2, timeout_s=30)
        stop_producing.set()
        loader.join(60)
        assert wait_until(lambda: produced <= set().union(*rows(out).values()), timeout_s=60)
        decision = status(port)["last_decision"]
        assert decision is not None and "needed for the speeds" in decision["reason"]
    finally:
        stop_producing.set()
        loader.join(60)
        sidecar.send_signal(signal.SIGTERM)
        code = sidecar.wait(60)
    assert code == 0
    assert produced and produced <= set().union(*rows(out).values())  # nothing lost
    assert {"sink-0", "sink-1", "sink-2"} <= set(rows(out))
    assert not status(port)  # the endpoint is gone with the process
    assert consumers_running(out) == []  # and the sidecar stopped its consumers on the way out


def test_consumers_do_not_outlive_a_killed_sidecar(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """kill -9 of the sidecar: its consumers get SIGTERM from the kernel and leave; a new
    sidecar starts each member identity once."""
    topic = topic_factory(2)
    out = tmp_path / "out"
    out.mkdir()
    consumer = (
        f"{shlex.quote(sys.executable)} -m consumer_sdk.cli --sink jsonl:{out}/{{identity}}.jsonl"
    )
    args = [
        *("--bootstrap-servers", kafka, "--group", f"g-{topic}", "--topics", topic),
        *("--capacity", "1000", "--min-replicas", "2", "--max-replicas", "2"),
        *("--snapshot-topic", topic_factory(1, prefix="speeds"), "--interval", "0.5"),
        *("--identity-prefix", "sink"),
        *("--lock-file", str(tmp_path / "lock"), "--http-port", "0"),
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        # In the environment, not a flag: consumers_running() looks for ``out`` in command
        # lines, and the sidecar's own must not count.
        "AUTOSCALER_CONSUMER_COMMAND": consumer,
        "AUTOSCALER_SESSION_TIMEOUT_MS": "1500",
        "AUTOSCALER_HEARTBEAT_INTERVAL_MS": "100",
        "AUTOSCALER_LEADER_DELAY_SECS": "0.1",
    }

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "sidecar.cli", *args], env=env, cwd=ROOT)

    sidecar = start()
    try:
        assert wait_until(lambda: len(consumers_running(out)) == 2, timeout_s=60)
        sidecar.kill()
        sidecar.wait(30)
        assert wait_until(lambda: consumers_running(out) == [], timeout_s=60)
        sidecar = start()
        assert wait_until(lambda: len(consumers_running(out)) == 2, timeout_s=60)
    finally:
        sidecar.send_signal(signal.SIGTERM)
        sidecar.wait(60)
    assert wait_until(lambda: consumers_running(out) == [], timeout_s=30)


def test_a_sidecar_that_cannot_reach_kafka_says_so_retries_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    port = free_port()
    sidecar = subprocess.Popen(
        [
            *(sys.executable, "-m", "sidecar.cli"),
            *("--bootstrap-servers", f"127.0.0.1:{free_port()}", "--group", "g"),
            *("--topics", "t", "--capacity", "10", "--scaler", "none"),
            *("--http-port", str(port), "--lock-file", str(tmp_path / "lock")),
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_until(lambda: "cannot reach Kafka" in str(status(port).get("problems")), 60)
        assert status(port)["healthy"] is False
        with pytest.raises(urllib.error.HTTPError) as unhealthy:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert unhealthy.value.code == 503
        # Alive all the same: a liveness probe must not restart it for Kafka's outage.
        live = urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=5)
        assert live.read() == b"ok\n"
        assert sidecar.poll() is None  # still retrying
    finally:
        errors = stop_sidecar_process(sidecar)
    assert "cannot reach Kafka at 127.0.0.1:" in errors
