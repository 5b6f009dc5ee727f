"""The sidecar CLI with the local scaler and real consumer processes, under load."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from tests.sdk_helpers import wait_until

ROOT = Path(__file__).parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def status(port: int) -> dict[str, Any]:
    try:
        return dict(
            json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5).read())
        )
    except OSError:
        return {}


def consumers_running(folder: Path) -> list[int]:
    """Pids of live processes whose command line mentions ``folder``."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(folder).encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue
    return pids


def rows(folder: Path) -> dict[str, set[tuple[int, int]]]:
    found: dict[str, set[tuple[int, int]]] = {}
    for path in folder.glob("*.jsonl"):
        found[path.stem] = {
            (r["partition"], r["offset"]) for r in map(json.loads, path.read_text().splitlines())
        }
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
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AUTOSCALER_BOOTSTRAP_SERVERS": kafka,
        "AUTOSCALER_GROUP": f"g-{topic}",
        "AUTOSCALER_TOPICS": topic,
        "AUTOSCALER_CAPACITY": "400",  # records/s per consumer
        "AUTOSCALER_SNAPSHOT_TOPIC": topic_factory(1, prefix="speeds"),
        "AUTOSCALER_INTERVAL": "0.5",
        "AUTOSCALER_WINDOW": "4",
        "AUTOSCALER_MIN_WINDOW": "1.5",
        "AUTOSCALER_SCALER": "local",
        "AUTOSCALER_CONSUMER_COMMAND": consumer,
        "AUTOSCALER_IDENTITY_PREFIX": "sink",
        "AUTOSCALER_MAX_REPLICAS": "4",
        "AUTOSCALER_HTTP_PORT": str(port),
        "AUTOSCALER_LOCK_FILE": str(tmp_path / "lock"),
        # the consumers read these too: quick groups on the embedded broker
        "AUTOSCALER_SESSION_TIMEOUT_MS": "1500",
        "AUTOSCALER_HEARTBEAT_INTERVAL_MS": "100",
        "AUTOSCALER_LEADER_DELAY_SECS": "0.1",
        "AUTOSCALER_WAIT_TIME_SECS": "0.3",
    }
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
