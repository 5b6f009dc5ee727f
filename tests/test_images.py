"""The images users run (``make images``: containers/Containerfile), run with podman on the
Apache Kafka leg: the sidecar image serves /healthz and /metrics and publishes speeds; the
consumer image, on a read-only root file system, drains a topic into a Delta table on a
mounted folder, is killed with SIGKILL mid-stream and started again, and delta-rs counts
every produced record exactly once. Skipped with one line where podman or the images are
missing, unless ``KAFKA_AUTOSCALER_REQUIRE_CLUSTERS`` names ``images`` (CI does)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from packaging.utils import canonicalize_name

from benchmarks.support.lake_readers import key_counts
from consumer_sdk.lake.spark_config import SparkSinkConfig
from contract.local_ports import free_port
from local_kafka.clusters import ClusterKind, KafkaCluster, required_legs
from tests.kafka_helpers import TrackedLoad
from tests.python_locks import read_lock
from tests.sdk_helpers import wait_until

ROOT = Path(__file__).resolve().parent.parent
SIDECAR = "kafka-autoscaler-sidecar:latest"
CONSUMER = "kafka-autoscaler-consumer:latest"
ENV = {**os.environ, "CONTAINERS_CONF": str(ROOT / "containers" / "containers.conf")}


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], env=ENV, capture_output=True, text=True, check=check)


def missing_images() -> str | None:
    """Why the images cannot run here, or None."""
    if shutil.which("podman") is None:
        return "podman not installed (make images installs it as root)"
    absent = [
        i for i in (SIDECAR, CONSUMER) if podman("image", "exists", i, check=False).returncode
    ]
    return f"images not built (make images): {', '.join(absent)}" if absent else None


@pytest.fixture(scope="module", autouse=True)
def _images() -> None:
    reason = missing_images()
    if reason is None:
        return
    if "images" in required_legs():
        pytest.fail(f"the images leg is required here but cannot run: {reason}")
    pytest.skip(f"images leg skipped: {reason}")


@pytest.fixture
def apache(kafka_cluster_handle: KafkaCluster) -> KafkaCluster:
    if kafka_cluster_handle.kind is not ClusterKind.APACHE:
        pytest.skip("the images run on the Apache Kafka leg")
    return kafka_cluster_handle


@pytest.fixture
def container() -> Iterator[Callable[..., str]]:
    """``container(image, *podman_run_args, env={...})`` starts a detached container on the
    host's network; every one started is removed afterwards."""
    names: list[str] = []

    def run(image: str, *args: str, env: dict[str, str]) -> str:
        name = f"kafka-autoscaler-test-{uuid.uuid4().hex[:8]}"
        names.append(name)
        variables = [f"--env={key}={value}" for key, value in env.items()]
        podman("run", "--detach", "--name", name, "--network=host", *variables, *args, image)
        return name

    yield run
    for name in names:
        podman("rm", "--force", "--time=0", name, check=False)


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            status: int = answer.status
            return status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as answer:
        text: str = answer.read().decode()
        return text


def snapshots_published(bootstrap: str, topic: str) -> int:
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"peek-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        reader.subscribe([topic])
        messages = reader.consume(num_messages=10, timeout=10)
        return sum(1 for m in messages if m.error() is None and json.loads(m.value() or b"{}"))
    finally:
        reader.close()


# What an image has installed, and its Python's version (the locks' markers name it).
INSTALLED = (
    "import importlib.metadata as m, json, platform;"
    "print(json.dumps([platform.python_version(),"
    " {d.metadata['Name']: d.version for d in m.distributions()}]))"
)


@pytest.mark.parametrize(("image", "lock"), [(SIDECAR, "sidecar"), (CONSUMER, "consumer")])
def test_each_image_installs_exactly_its_hashed_lock(image: str, lock: str) -> None:
    """Every package in the image is the version requirements/<image>-image.txt pins, and
    every pin whose marker holds there is installed: the wheelhouse came from the lock."""
    python, installed = json.loads(
        podman("run", "--rm", "--entrypoint", "python3", image, "-c", INSTALLED).stdout
    )
    environment = {"python_full_version": python, "python_version": python.rsplit(".", 1)[0]}
    pins = {pin.name: pin for pin in read_lock(f"{lock}-image")}
    versions: dict[str, str] = {canonicalize_name(n): v for n, v in installed.items()}
    versions.pop("kafka-autoscaler")
    for name, installed_version in versions.items():
        assert name in pins, f"{image} has {name} {installed_version}, which no lock names"
        assert pins[name].version == installed_version, f"{image}: {name} {installed_version}"
    wanted = {name for name, pin in pins.items() if pin.applies(environment)}
    assert wanted <= set(versions), f"{image} lacks {sorted(wanted - set(versions))}"


def exit_code(name: str) -> int:
    return int(podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip())


def test_sidecar_image_serves_health_metrics_and_publishes_speeds(
    apache: KafkaCluster, container: Callable[..., str]
) -> None:
    topic = apache.create_topic(4, prefix="img")
    group = f"img-sidecar-{uuid.uuid4().hex[:8]}"
    port = free_port()
    name = container(
        SIDECAR,
        "--read-only",
        env={
            "AUTOSCALER_BOOTSTRAP_SERVERS": apache.bootstrap_servers,
            "AUTOSCALER_GROUP": group,
            "AUTOSCALER_TOPICS": topic,
            "AUTOSCALER_CAPACITY": "1000",
            "AUTOSCALER_SCALER": "none",
            "AUTOSCALER_HTTP_PORT": str(port),
        },
    )
    base = f"http://127.0.0.1:{port}"
    assert wait_until(lambda: http_status(f"{base}/healthz") == 200, 60.0), podman("logs", name)
    # The image's own HEALTHCHECK (podman's view of it) passes on the running sidecar.
    checked = podman("healthcheck", "run", name, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    speed = f'autoscaler_partition_speed{{partition="0",topic="{topic}"}}'
    assert wait_until(lambda: speed in metrics_text(f"{base}/metrics"), 60.0)
    assert wait_until(
        lambda: snapshots_published(apache.bootstrap_servers, f"{group}.autoscaler.speeds") > 0,
        60.0,
    )
    podman("stop", "--time=30", name)
    assert exit_code(name) == 0, podman("logs", name).stderr[-2000:]


def logs(name: str) -> str:
    """The tail of what container ``name`` wrote."""
    return podman("logs", name).stderr[-3000:]


def test_consumer_image_lands_every_record_once_through_a_kill(
    apache: KafkaCluster, container: Callable[..., str], tmp_path: Path
) -> None:
    partitions = 4
    topic = apache.create_topic(partitions, prefix="img")
    lake = tmp_path / "lake"
    lake.mkdir()
    lake.chmod(0o777)  # the image's user is not this one
    with TrackedLoad(apache.bootstrap_servers, topic, partitions) as load:
        name = container(
            CONSUMER,
            "--read-only",
            "--tmpfs=/tmp:rw,size=2g,mode=1777",
            f"--volume={lake}:/lake",
            env={
                "AUTOSCALER_BOOTSTRAP_SERVERS": apache.bootstrap_servers,
                "AUTOSCALER_GROUP": f"img-consumer-{uuid.uuid4().hex[:8]}",
                "AUTOSCALER_TOPICS": topic,
                "AUTOSCALER_CAPACITY": "1000",
                "AUTOSCALER_SINK": "spark",
                "AUTOSCALER_SPARK_WAREHOUSE": "/lake",
                "AUTOSCALER_WAIT_TIME_SECS": "0.5",
                "AUTOSCALER_BATCH_BYTES": "262144",
                "AUTOSCALER_SESSION_TIMEOUT_MS": "6000",
            },
        )
        config = SparkSinkConfig(warehouse=str(lake))
        table = config.table_for(topic)

        def landed() -> int:
            return sum(key_counts(config, table).values())

        assert wait_until(lambda: landed() > 0, 240.0), logs(name)
        podman("kill", "--signal=KILL", name)
        killed_at = landed()
        podman("start", name)
        assert wait_until(lambda: landed() > killed_at, 240.0), logs(name)
    acked = load.acked
    assert wait_until(lambda: landed() >= len(acked), 240.0), logs(name)
    podman("stop", "--time=60", name)
    counts = key_counts(config, table)
    assert set(counts) == acked
    assert set(counts.values()) == {1}
    assert exit_code(name) == 0, logs(name)
