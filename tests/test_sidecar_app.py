"""The sidecar: configuration errors, and the loop on a fake clock with a recording scaler."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from assignor.backlog import DrainRule
from assignor.group_plan import SpeedView
from consumer_sdk.config import ConsumerConfig
from consumer_sdk.snapshot_cache import SnapshotCache
from contract.snapshot import Snapshot
from local_kafka.clusters import Capability, KafkaCluster
from sidecar.app import Sidecar
from sidecar.config import SidecarConfig, parse_args
from sidecar.controller import Action, Decision
from sidecar.http import serve
from sidecar.join_watch import MemberFailure
from sidecar.keda import KedaController
from sidecar.leader import FileLease
from sidecar.publisher import SPEEDS_TOPIC_CONFIG, SnapshotPublisher, ensure_speeds_topic
from sidecar.scalers.local import LocalScaler

BASE = ["--bootstrap-servers", "k:9092", "--group", "g", "--topics", "a,b", "--capacity", "100"]


def test_flags_and_environment() -> None:
    config = parse_args(
        [*BASE, "--max-replicas", "7"],
        {
            "AUTOSCALER_HEURISTIC": "mbf",
            "AUTOSCALER_MAX_REPLICAS": "3",
            "AUTOSCALER_WAIT_TIME_SECS": "12",  # the consumers' variable, read by both
        },
    )
    assert config.wait_time_secs == 12.0 and config.drain_seconds > 0
    assert config.topics == ("a", "b") and config.heuristic == "mbf"
    assert config.max_replicas == 7  # the flag wins over the variable
    assert config.snapshot_topic == "g.autoscaler.speeds"
    assert config.lock_file == f"/tmp/kafka-autoscaler-{os.getuid()}/g.lock"


def test_the_local_scaler_hands_the_shared_settings_to_its_consumers() -> None:
    """Given by flags, not variables, the settings still reach the consumers it starts."""
    from consumer_sdk.config import ConsumerConfig
    from sidecar.cli import build_scaler

    config = parse_args([*BASE, "--wait-time-secs", "2", "--heuristic", "mbf"], {})
    scaler = build_scaler(config)
    assert isinstance(scaler, LocalScaler)
    consumer = ConsumerConfig.from_env(scaler.env)
    assert consumer.bootstrap_servers == "k:9092" and consumer.topics == ("a", "b")
    assert consumer.capacity == 100.0 and consumer.wait_time_secs == 2.0
    assert consumer.heuristic == "mbf" and consumer.snapshot_topic == config.snapshot_topic


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        ([], {}, "missing --bootstrap-servers (AUTOSCALER_BOOTSTRAP_SERVERS), --group"),
        (
            BASE,
            {"AUTOSCALER_INTERVAL": "soon"},
            "--interval (AUTOSCALER_INTERVAL) must be a number, got 'soon'",
        ),
        ([*BASE, "--capacity", "-1"], {}, "--capacity (AUTOSCALER_CAPACITY) must be a finite"),
        ([*BASE, "--min-window", "60"], {}, "--min-window (AUTOSCALER_MIN_WINDOW) must be in"),
        ([*BASE, "--heuristic", "best"], {}, "--heuristic (AUTOSCALER_HEURISTIC) must be one of"),
        (
            [*BASE, "--group-protocol", "kip848"],
            {},
            "--group-protocol (AUTOSCALER_GROUP_PROTOCOL) must be one of classic, consumer",
        ),
        (
            [*BASE, "--group-protocol", "consumer", "--scaler", "kubernetes"],
            {"AUTOSCALER_WORKLOAD_NAME": "sinks"},
            "--group-protocol (AUTOSCALER_GROUP_PROTOCOL) must be classic unless the members are "
            "named before they join",
        ),
        (
            [
                *BASE,
                "--group-protocol",
                "consumer",
                "--group",
                "orders sink",
                "--snapshot-topic",
                "s",
            ],
            {},
            "--group (AUTOSCALER_GROUP) must be with --group-protocol consumer, 1 to 231 letters, "
            "digits, '.', '_' or '-' (its plans topic is _autoscaler_plans.<group>), got "
            "'orders sink'",
        ),
        (
            [*BASE, "--group-type", "queue"],
            {},
            "--group-type (AUTOSCALER_GROUP_TYPE) must be one of consumer, share",
        ),
        (
            [*BASE, "--group-type", "share", "--group-protocol", "consumer"],
            {},
            "--group-type (AUTOSCALER_GROUP_TYPE) must be consumer with --group-protocol consumer",
        ),
        (
            [*BASE, "--group-type", "share", "--keda-lag-threshold", "1000"],
            {},
            "--group-type (AUTOSCALER_GROUP_TYPE) must be consumer with --keda-lag-threshold",
        ),
        (
            [*BASE, "--group-type", "share", "--share-loads-topic", " "],
            {},
            "--share-loads-topic (AUTOSCALER_SHARE_LOADS_TOPIC) must be a topic name",
        ),
        ([*BASE, "--scaler", "kubernetes"], {}, "--workload-name (AUTOSCALER_WORKLOAD_NAME)"),
        ([*BASE, "--min-replicas", "5", "--max-replicas", "2"], {}, "--max-replicas"),
        ([*BASE, "--http-port", "99999"], {}, "--http-port (AUTOSCALER_HTTP_PORT) must be"),
        (
            [*BASE, "--keda-lag-threshold", "-5"],
            {},
            "--keda-lag-threshold (AUTOSCALER_KEDA_LAG_THRESHOLD) must be a number of records",
        ),
        (
            [*BASE, "--local-racks", "a,,b"],
            {},
            "--local-racks (AUTOSCALER_LOCAL_RACKS) must be comma-separated rack names",
        ),
        (
            [*BASE, "--rack-locality", "nearest"],
            {},
            "--rack-locality (AUTOSCALER_RACK_LOCALITY) must be one of none, leader, replicas",
        ),
        (
            [*BASE, "--wait-time-secs", "0"],
            {},
            "--wait-time-secs (AUTOSCALER_WAIT_TIME_SECS) must be a number of seconds in",
        ),
        (
            [*BASE, "--consumer-command", "python 'unbalanced"],
            {},
            "--consumer-command (AUTOSCALER_CONSUMER_COMMAND) must be the consumer program",
        ),
        (
            ["--bootstrap-servers", "k:notaport", *BASE[2:]],
            {},
            "--bootstrap-servers (AUTOSCALER_BOOTSTRAP_SERVERS) must be a comma-separated",
        ),
    ],
)
def test_bad_configuration_exits_2_naming_the_flag(
    argv: list[str], environ: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv, environ)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_capacity_auto_starts_from_the_initial_value_and_measures() -> None:
    auto = parse_args([*BASE[:-1], "auto", "--capacity-initial", "250"], {})
    assert (auto.capacity, auto.capacity_auto) == (250.0, True)
    by_env = parse_args(
        BASE[:-2], {"AUTOSCALER_CAPACITY": "AUTO", "AUTOSCALER_CAPACITY_UNIT": "bytes/s"}
    )
    assert (by_env.capacity, by_env.capacity_auto) == (1_000_000.0, True)
    declared = parse_args(BASE, {})
    assert (declared.capacity, declared.capacity_auto) == (100.0, False)
    # Its consumers read the same variables: "auto" there packs by the initial value.
    consumer = ConsumerConfig.from_env({**auto.shared_environment(), "AUTOSCALER_CAPACITY": "auto"})
    assert consumer.capacity == 250.0


def test_a_bad_initial_capacity_exits_2_naming_its_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args([*BASE[:-1], "auto", "--capacity-initial", "-3"], {})
    assert exited.value.code == 2
    assert "--capacity-initial (AUTOSCALER_CAPACITY_INITIAL) must be a finite number >= 0" in (
        capsys.readouterr().err
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


class RecordingScaler:
    def __init__(self, replicas: int) -> None:
        self.count = replicas
        self.calls: list[int] = []
        self.trouble: list[str] = []
        self.failing: list[MemberFailure] = []

    def problems(self) -> list[str]:
        return self.trouble

    def failing_members(self) -> list[MemberFailure]:
        return self.failing

    def member_words(self) -> list[MemberFailure]:
        return []

    def replicas(self) -> int:
        return self.count

    def scale(self, replicas: int) -> None:
        self.calls.append(replicas)
        self.count = replicas

    def close(self) -> None:
        return None


def loop_config(kafka: str, topic: str, **overrides: object) -> SidecarConfig:
    """A sidecar measuring ``topic`` for a capacity of 100 records/s, deciding as soon as
    the speeds show (2 s of offsets, no settle time), scaling nothing itself."""
    settings: dict[str, object] = {
        "bootstrap_servers": kafka,
        "group": f"g-{topic}",
        "topics": (topic,),
        "capacity": 100.0,
        "min_window": 2.0,
        # The first speeds undercount the load (its ramp, not a step).
        "scale_up_settle": 0.0,
        "scaler": "none",
        **overrides,
    }
    return SidecarConfig(**settings)  # type: ignore[arg-type]


def test_loop_scales_publishes_and_serves(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(4)
    speeds_topic = topic_factory(1, prefix="speeds")
    config = loop_config(
        kafka, topic, snapshot_topic=speeds_topic, lock_file=str(tmp_path / "lock")
    )
    clock = FakeClock()
    scaler = RecordingScaler(1)
    sidecar = Sidecar(config, scaler, FileLease(config.lock_path), clock=clock)
    standby = Sidecar(config, RecordingScaler(1), FileLease(config.lock_path), clock=clock)
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})

    def check_http() -> None:
        server = serve("127.0.0.1", 0, sidecar.endpoints())
        try:
            base = f"http://127.0.0.1:{server.server_port}"
            status = json.loads(urllib.request.urlopen(base + "/status", timeout=10).read())
            decided = [
                f"{d.action.value} {d.current}->{d.desired}: {d.reason}" for d in sidecar.decisions
            ]
            assert status["replicas"] == 4 and status["leader"] is True, decided
            # Nobody consumes: no member described, none seen committing.
            assert status["group_members"]["reading"] == 0
            assert not status["group_members"]["described"]
            assert status["capacity"]["mode"] == "declared"
            assert status["capacity"]["declared"] == 100.0 and status["capacity"]["in_use"] == 100.0
            assert status["speeds"] == pytest.approx({f"{topic}:{p}": 90.0 for p in range(4)})
            page = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
            assert f'autoscaler_partition_speed{{partition="0",topic="{topic}"}} 90.0' in page
            assert 'autoscaler_decisions_total{action="scale_up"}' in page
            assert urllib.request.urlopen(base + "/healthz", timeout=10).status == 200
            # A crash-looping consumer: /healthz says so, /status says which.
            scaler.trouble = ["consumer sink-0 is crash-looping: exited 3 times in a row"]
            with pytest.raises(urllib.error.HTTPError) as looping:
                urllib.request.urlopen(base + "/healthz", timeout=10)
            assert looping.value.code == 503
            assert looping.value.read().decode().splitlines() == ["unhealthy", *scaler.trouble]
            status = json.loads(urllib.request.urlopen(base + "/status", timeout=10).read())
            assert scaler.trouble[0] in status["problems"] and status["healthy"] is False
            scaler.trouble = []
            clock.now += 60  # no tick for a minute: unhealthy
            with pytest.raises(urllib.error.HTTPError) as unhealthy:
                urllib.request.urlopen(base + "/healthz", timeout=10)
            assert unhealthy.value.code == 503
            assert unhealthy.value.read().decode().splitlines()[1].startswith("no tick for ")
            # Not stuck yet for /livez: a liveness probe leaves it be until two minutes pass.
            assert urllib.request.urlopen(base + "/livez", timeout=10).status == 200
            clock.now += 61
            with pytest.raises(urllib.error.HTTPError) as stuck:
                urllib.request.urlopen(base + "/livez", timeout=10)
            assert stuck.value.code == 503
            assert "loop has not moved for 121 s" in stuck.value.read().decode()
        finally:
            server.shutdown()

    async def run() -> list[Action]:
        await sidecar.start()
        await standby.start()
        actions = []
        try:
            for _ in range(5):  # 90 records/s on each of 4 partitions: 360 of 100 per consumer
                for partition in range(4):
                    for _ in range(90):
                        producer.produce(topic, value=b"v", partition=partition)
                assert producer.flush(30) == 0
                clock.now += 1.0
                decision = await sidecar.tick()
                assert await standby.tick() is None  # standby measures, never scales
                actions.append(decision.action if decision else Action.WAIT)
            check_http()
            return actions
        finally:
            await standby.stop()
            await sidecar.stop()

    actions = asyncio.run(run())
    assert Action.SCALE_UP in actions
    assert scaler.calls[0] == 4 and scaler.count == 4  # 4 x 90 cannot share a consumer of 100
    assert (
        sidecar.last_decision is not None
        and "needed for the speeds" in sidecar.last_decision.reason
    )

    async def cached() -> SpeedView:
        cache = SnapshotCache(kafka, speeds_topic, config.group, max_age_s=60)
        await cache.start()
        try:
            view = cache.view()
            assert view is not None
            return view
        finally:
            await cache.stop()

    view = asyncio.run(cached())
    by_name = {f"{tp.topic}:{tp.partition}": s for tp, s in view.speeds.items()}
    assert by_name == pytest.approx({f"{topic}:{p}": 90.0 for p in range(4)})
    # The assignor packs by the rule the controller sized the group by.
    assert view.drain == DrainRule(config.drain_seconds, config.wait_time_secs)


def test_a_restarted_sidecar_starts_from_the_capacity_its_previous_incarnation_published(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(2)
    config = SidecarConfig(
        bootstrap_servers=kafka,
        group=f"g-{topic}",
        topics=(topic,),
        capacity=100.0,
        capacity_auto=True,
        snapshot_topic=topic_factory(1, prefix="speeds"),
        scaler="none",
    )

    async def restart() -> dict[str, object]:
        previous = SnapshotPublisher(kafka, config.snapshot_topic)
        await previous.start()
        try:  # its last snapshot, 30 s ago; then another group's on the same topic
            await previous.publish(Snapshot(config.group, 41, time.time() - 30, "records/s", {}))
            await previous.publish(
                Snapshot(config.group, 42, time.time() - 29, "records/s", {}, None, 400.0)
            )
            await previous.publish(Snapshot("other", 7, time.time(), "records/s", {}, None, 9.0))
        finally:
            await previous.stop()
        sidecar = Sidecar(config, None, None)
        await sidecar.start()
        try:
            return sidecar.capacity.status(0.0, 1.0)
        finally:
            await sidecar.stop()

    status = asyncio.run(restart())
    assert status["carried_over"] == 400.0 and status["in_use"] == 400.0
    assert status["measured"] is None  # until the consumers measure again


def test_a_stop_mid_tick_ends_the_tick_and_a_client_that_will_not_close_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = SidecarConfig(
        bootstrap_servers="127.0.0.1:1", group="g", topics=("t",), capacity=100.0, scaler="none"
    )
    sidecar = Sidecar(config, None, None)
    stop = asyncio.Event()
    seen: list[str] = []

    async def connected(_: asyncio.Event) -> bool:
        return True

    async def tick_waiting_for_a_dead_broker() -> None:
        seen.append("tick")
        stop.set()  # SIGTERM arrives while a request waits for its timeout
        await asyncio.Event().wait()

    async def publisher_flushing_for_ever() -> None:
        seen.append("closing")
        await asyncio.Event().wait()

    async def monitor_closes() -> None:
        seen.append("monitor closed")

    monkeypatch.setattr(sidecar, "connect", connected)
    monkeypatch.setattr(sidecar, "tick", tick_waiting_for_a_dead_broker)
    monkeypatch.setattr(sidecar.publisher, "stop", publisher_flushing_for_ever)
    monkeypatch.setattr(sidecar.monitor, "stop", monitor_closes)
    monkeypatch.setattr("sidecar.app.CLOSE_TIMEOUT_S", 0.01)
    asyncio.run(sidecar.run(stop))
    assert seen == ["tick", "closing", "monitor closed"]


def test_the_speeds_topic_is_created_compacted_with_a_retention(
    kafka_cluster_handle: KafkaCluster,
) -> None:
    kafka = kafka_cluster_handle.bootstrap_servers
    topic = f"g-{uuid.uuid4().hex[:8]}.autoscaler.speeds"
    created = asyncio.run(ensure_speeds_topic(kafka, topic))
    if not kafka_cluster_handle.supports(Capability.CREATE_TOPICS):
        assert not created  # said in a log line; the sidecar goes on
        return
    assert created
    assert not asyncio.run(ensure_speeds_topic(kafka, topic))  # exists: left as it is
    from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": kafka})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    for key, value in SPEEDS_TOPIC_CONFIG.items():
        assert configs[key].value == value, key


def test_an_http_port_in_use_is_one_line(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                *(sys.executable, "-m", "sidecar.cli", *BASE),
                *("--scaler", "none", "--http-port", str(port)),
                *("--lock-file", str(tmp_path / "lock")),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert "cannot serve on 127.0.0.1:" in result.stderr
    assert "Traceback" not in result.stderr


def test_every_flag_says_what_it_means_its_default_and_variable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dataclasses import fields

    from contract.settings import setting_help

    assert all(setting_help(f) for f in fields(SidecarConfig))
    with pytest.raises(SystemExit):
        parse_args(["--help"], {})
    page = " ".join(capsys.readouterr().out.split())
    assert (
        "seconds of offsets a speed is the slope of, > 0 (default 30.0; env AUTOSCALER_WINDOW)"
        in page
    )
    assert "(required; env AUTOSCALER_CAPACITY)" in page


def test_keda_lag_threshold_swaps_in_the_keda_style_controller() -> None:
    config = parse_args([*BASE, "--keda-lag-threshold", "5000", "--scaler", "none"], {})
    sidecar = Sidecar(config, None, None)
    assert isinstance(sidecar.controller, KedaController)
    assert sidecar.controller.rule.lag_threshold == 5000
    ours = Sidecar(parse_args([*BASE, "--scaler", "none"], {}), None, None)
    assert not isinstance(ours.controller, KedaController)


def test_a_held_scale_up_is_logged_once_per_demand(caplog: pytest.LogCaptureFixture) -> None:
    sidecar = Sidecar(parse_args([*BASE, "--scaler", "none"], {}), None, None)
    waiting = "held: scaled up 3 s ago to 4, and the group has not taken that in yet"
    decisions = [
        Decision(0.0, Action.HOLD, 4, 4, 4, "4 consumer(s) needed"),
        Decision(1.0, Action.HOLD, 4, 4, 5, waiting),
        Decision(2.0, Action.HOLD, 4, 4, 5, waiting),  # the same hold: not again
        Decision(3.0, Action.HOLD, 4, 4, 6, waiting),  # its demand grew: said again
        Decision(4.0, Action.SCALE_UP, 4, 6, 6, "6 consumer(s) needed"),
        Decision(5.0, Action.HOLD, 6, 6, 2, "lower for 1 s"),  # a scale-down waiting: debug
    ]
    with caplog.at_level(logging.INFO, logger="sidecar.app"):
        for decision in decisions:
            sidecar.record(decision)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert [line.split(":")[0] for line in said] == [
        "hold 4 -> 4",
        "hold 4 -> 4",
        "scale_up 4 -> 6",
    ]
    assert waiting in said[0]


def test_consumers_that_cannot_join_hold_scale_ups_and_say_why(
    kafka: str, topic_factory: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    topic = topic_factory(4)
    config = loop_config(kafka, topic)
    clock = FakeClock()
    scaler = RecordingScaler(1)
    sidecar = Sidecar(config, scaler, None, clock=clock)
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
    exited = MemberFailure("sink-1", "exited with 1 after 0.4 s (1 in a row): bad password")

    def healthz(server_port: int) -> tuple[int, list[str]]:
        with urllib.request.urlopen(f"http://127.0.0.1:{server_port}/healthz", timeout=10) as r:
            return r.status, r.read().decode().splitlines()

    async def tick(rate: int) -> Decision:
        for partition in range(4):
            for _ in range(rate):
                producer.produce(topic, value=b"v", partition=partition)
        assert producer.flush(30) == 0
        clock.now += 1.0
        decision = await sidecar.tick()
        assert decision is not None
        return decision

    async def run() -> list[Decision]:
        await sidecar.start()
        server = serve("127.0.0.1", 0, sidecar.endpoints())
        held = []
        try:
            while scaler.count < 2:  # 4 partitions at 40/s: 2 consumers of 100
                assert clock.now < 5030, sidecar.decisions[-1]
                await tick(40)
            scaler.count = 1  # scaled down by hand: the controller resynchronises
            scaler.failing = [exited]
            for _ in range(5):  # the load doubles: 4 are needed, and none is added
                held.append(await tick(80))
            assert healthz(server.server_port) == (200, ["degraded", sidecar.join_problem])
            assert sidecar.sized() == 1  # what KEDA is told: the count it can stand behind
            page = sidecar.status()["not_joining"]
            assert page["failing"] == [{"member": "sink-1", "reason": exited.reason}]
            scaler.failing = []  # fixed: the sidecar sizes again once the group holds them
            scaler.count = 2
            held.append(await tick(80))
            return held
        finally:
            server.shutdown()
            await sidecar.stop()

    with caplog.at_level(logging.INFO, logger="sidecar.app"):
        decisions = asyncio.run(run())
    *holding, after = decisions
    assert all(d.action is Action.HOLD and d.desired == 1 for d in holding), holding
    assert all(d.demand is not None and d.demand >= 3 for d in holding)
    line = holding[0].reason.split("held: ")[1]
    assert line.startswith("consumers are not joining the group: ")
    assert line.endswith("sink-1: exited with 1 after 0.4 s (1 in a row): bad password")
    said = [r.getMessage() for r in caplog.records if "scale-up until" in r.getMessage()]
    assert len(said) == 1 and said[0].endswith("no scale-up until they join")  # said once
    # No member was ever described (nobody consumes here): unknown on the embedded broker,
    # 0 on Apache Kafka, where the hold then lasts until members join.
    if sidecar.last_reading is not None and sidecar.last_reading.group_members is None:
        assert after.action is Action.SCALE_UP and after.desired >= 3
    else:
        assert after.action is Action.HOLD and "0 of 2 joined" in after.reason
