"""Apache Kafka on this machine: KRaft nodes started from the official jars, no Docker.

Each node is one JVM in combined mode (``process.roles=broker,controller``) on 127.0.0.1 with
free ports, a temporary log directory and a small heap. The jars come from Maven Central
through the committed lock ``local_kafka/locks/apache-kafka.lock`` (see
:mod:`consumer_sdk.lake.jar_lock`). Offers the same surface as the embedded broker
(:class:`local_kafka.embedded.BrokerHandle`): start/stop, bootstrap string, ``create_topic``,
``broker_down`` (kill -9 of a node) / ``broker_up`` (restart it on the same data), plus a clean
``broker_stop``.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from consumer_sdk.lake.jar_lock import JarLockError, ensure_jars, read_lock
from contract.local_ports import free_port
from local_kafka.broker_assignor import broker_properties, ensure_broker_assignor_jar
from local_kafka.embedded import BrokerHandle, EmbeddedKafkaError, check_new_topic
from local_kafka.group_coordinators import wait_in_child
from local_kafka.kafka_jars import KAFKA_LOCK
from local_kafka.secured import SecuredListeners

MAX_NODES = 5
_READY_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 20.0
_JVM_OPTIONS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
# Quiet logs (warnings and errors) to each node's server.log; our broker assignor's at INFO.
_LOG4J2 = """Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Logger:
      - name: kafkaautoscaler
        level: INFO
        additivity: false
        AppenderRef:
          - ref: STDOUT
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
"""


class ApacheKafkaUnavailable(EmbeddedKafkaError):
    """Java or the Kafka jars are missing, so no Apache Kafka node can start here."""


def kafka_version() -> str:
    """The pinned Apache Kafka version (from the lock's ``kafka_2.13`` root)."""
    for root in read_lock(KAFKA_LOCK).roots:
        group, artifact, version = root.split(":")
        if (group, artifact) == ("org.apache.kafka", "kafka_2.13"):
            return version
    raise JarLockError(f"{KAFKA_LOCK} has no org.apache.kafka:kafka_2.13 root")


def java_executable() -> str:
    """The ``java`` to run nodes with: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME", "").strip()
    candidate = Path(home, "bin", "java") if home else None
    if candidate is not None and candidate.is_file():
        return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise ApacheKafkaUnavailable("no java on PATH (Apache Kafka needs Java 17 or later)")
    return found


def kafka_classpath() -> str:
    """The node classpath, fetching and verifying the locked jars if needed."""
    try:
        paths = ensure_jars(read_lock(KAFKA_LOCK))
    except JarLockError as exc:
        raise ApacheKafkaUnavailable(f"Apache Kafka jars unavailable: {exc}") from None
    return os.pathsep.join(str(p) for p in paths)


def _cluster_id() -> str:
    """A random Kafka cluster id (base64 of a UUID). Like Kafka's own Uuid.randomUuid, never
    one starting with '-': the storage tool would read it as an option."""
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not candidate.startswith("-"):
            return candidate


@dataclass
class _Node:
    node_id: int
    broker_port: int
    controller_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    # The secured listeners' ports (0: none; local_kafka.secured).
    sasl_port: int = 0
    mtls_port: int = 0

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def node_properties(
    node: _Node, voters: str, nodes: int, host: str = "127.0.0.1"
) -> dict[str, str]:
    """The ``server.properties`` of one combined node of an ``nodes``-node cluster, its
    client listener on ``host``."""
    replicas = str(min(nodes, 3))
    return {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": (
            f"PLAINTEXT://{host}:{node.broker_port},CONTROLLER://127.0.0.1:{node.controller_port}"
        ),
        "advertised.listeners": f"PLAINTEXT://{host}:{node.broker_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(node.data_dir),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": replicas,
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": "1",
        # Groups form at once, and tests may use short sessions (the broker default floor is 6 s).
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "500",
        # KIP-848 groups: short heartbeats and sessions so the peer benchmark settles quickly.
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.session.timeout.ms": "6000",
        "group.consumer.min.heartbeat.interval.ms": "100",
        "group.consumer.heartbeat.interval.ms": "250",
        # A killed node is fenced (its partitions' leadership moves) after 3 s, not 9 s.
        "broker.session.timeout.ms": "3000",
        "broker.heartbeat.interval.ms": "500",
        # Two cores here: few threads per node.
        "num.network.threads": "2",
        "num.io.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "background.threads": "2",
        "log.retention.hours": "24",
        "log.segment.bytes": str(64 * 1024 * 1024),
        "auto.create.topics.enable": "true",
    }


class ApacheKafka(BrokerHandle):
    """An Apache Kafka cluster of 1 to :data:`MAX_NODES` KRaft nodes on 127.0.0.1.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Node ids run from 1 to
    ``brokers``; ``racks`` gives node i the rack ``racks[i - 1]`` (and consumers may fetch
    from a replica in their own rack); ``broker_assignor`` loads our KIP-848 assignor
    (:mod:`local_kafka.broker_assignor`) reading plans from this cluster (on a ``secured``
    cluster, over SASL_SSL as :data:`~local_kafka.secured.ASSIGNOR_USER`). ``host`` is the
    address clients connect to (a pod network's gateway, say, for pods on a bridge); the
    controllers stay on loopback. ``heap_committed`` starts each node with its whole heap
    committed and touched (``-Xms`` = ``-Xmx``, ``-XX:+AlwaysPreTouch``, as production brokers
    run), so its resident memory no longer grows as the heap expands: what a long run needs
    to tell a leak from a heap filling up. ``native_memory_tracking`` starts each node with
    the JVM's native memory tracking (summary level), so ``jcmd <pid> VM.native_memory``
    can split its memory by kind (code cache, threads, GC, malloc, ...). ``startup_seconds``
    tells how long the last :meth:`start` took.
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        heap_mb: int = 512,
        heap_committed: bool = False,
        native_memory_tracking: bool = False,
        work_dir: Path | None = None,
        settings: Mapping[str, str] | None = None,
        secured: SecuredListeners | None = None,
        racks: Sequence[str] | None = None,
        broker_assignor: bool = False,
        host: str = "127.0.0.1",
    ) -> None:
        if not isinstance(brokers, int) or isinstance(brokers, bool):
            raise ValueError(f"brokers must be an integer in [1, {MAX_NODES}], got {brokers!r}")
        if not 1 <= brokers <= MAX_NODES:
            raise ValueError(f"brokers must be an integer in [1, {MAX_NODES}], got {brokers!r}")
        if not isinstance(heap_mb, int) or not 128 <= heap_mb <= 16384:
            raise ValueError(f"heap_mb must be an integer in [128, 16384], got {heap_mb!r}")
        if racks is not None and (
            isinstance(racks, str)
            or len(racks) != brokers
            or not all(isinstance(r, str) and r and r.isprintable() and " " not in r for r in racks)
        ):
            raise ValueError(
                f"racks must name one rack per broker ({brokers}), each a non-empty name "
                f"without spaces, got {racks!r}"
            )
        self.brokers = brokers
        self.racks = tuple(racks) if racks is not None else None
        self.heap_mb = heap_mb
        self.heap_committed = heap_committed
        self.native_memory_tracking = native_memory_tracking
        self.settings = dict(settings or {})  # node properties over node_properties()
        self.secured = secured
        self.broker_assignor = broker_assignor
        self.host = host
        self._work_dir = work_dir
        self._owns_work_dir = False
        self._nodes: list[_Node] = []
        self._java = ""
        self._classpath = ""
        self._bootstrap = None
        self.startup_seconds = 0.0
        self._admin: Any = None

    # lifecycle -------------------------------------------------------------------------
    def start(self) -> Self:
        """Format and start every node, then wait until all of them serve; idempotent."""
        if self._nodes:
            return self
        started = time.monotonic()
        self._java = java_executable()
        self._classpath = kafka_classpath()
        if self.broker_assignor:
            jar = ensure_broker_assignor_jar([Path(p) for p in self._classpath.split(os.pathsep)])
            self._classpath = os.pathsep.join([self._classpath, str(jar)])
        if self._work_dir is None:
            self._work_dir = Path(tempfile.mkdtemp(prefix="apache-kafka-"))
            self._owns_work_dir = True
        nodes = [
            _Node(i, free_port(), free_port(), self._work_dir / f"node-{i}")
            for i in range(1, self.brokers + 1)
        ]
        if self.secured is not None:
            for node in nodes:
                node.sasl_port, node.mtls_port = free_port(), free_port()
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)
        cluster_id = _cluster_id()
        self._nodes = nodes
        plans_bootstrap = ",".join(f"{self.host}:{n.broker_port}" for n in nodes)
        plans_client: dict[str, str] = {}
        if self.secured is not None and self.broker_assignor:
            # The assignors read as a SCRAM user of their own, as on a secured cluster
            # whose only listeners clients may use are secured ones.
            plans_bootstrap = ",".join(f"127.0.0.1:{n.sasl_port}" for n in nodes)
            plans_client = self.secured.reader_properties()
        try:
            for node in nodes:
                node.directory.mkdir(parents=True, exist_ok=True)
                properties = {
                    **node_properties(node, voters, self.brokers, self.host),
                    **self._secured_properties(node),
                    **self._rack_properties(node),
                    **(
                        broker_properties(plans_bootstrap, client=plans_client)
                        if self.broker_assignor
                        else {}
                    ),
                    **self.settings,
                }
                node.config_path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
                (node.directory / "log4j2.yaml").write_text(_LOG4J2)
            formats = [self._format(node, cluster_id) for node in nodes]
            for node, format_process in zip(nodes, formats, strict=True):
                if format_process.wait(timeout=_READY_TIMEOUT_S) != 0:
                    raise EmbeddedKafkaError(
                        f"formatting node {node.node_id} failed:\n{node.log_tail()}"
                    )
            for node in nodes:
                self._launch(node)
            self._bootstrap = ",".join(f"{self.host}:{n.broker_port}" for n in nodes)
            self._wait_ready(set(range(1, self.brokers + 1)), started + _READY_TIMEOUT_S)
            offsets_partitions = int(properties["offsets.topic.num.partitions"])
            waiting = wait_in_child(self._bootstrap, offsets_partitions, started + _READY_TIMEOUT_S)
            if waiting:
                raise EmbeddedKafkaError(
                    f"Apache Kafka coordinates no group yet on {len(waiting)} of the "
                    f"{offsets_partitions} partitions of __consumer_offsets after "
                    f"{_READY_TIMEOUT_S:.0f} s"
                )
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _format(self, node: _Node, cluster_id: str) -> subprocess.Popen[bytes]:
        with node.log_path.open("ab") as log:
            return subprocess.Popen(
                [
                    self._java,
                    "-Xmx256m",
                    "-cp",
                    self._classpath,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    cluster_id,
                    "-c",
                    str(node.config_path),
                    *(self.secured.format_arguments() if self.secured is not None else []),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def _rack_properties(self, node: _Node) -> dict[str, str]:
        """``broker.rack``, and consumers fetch from an in-sync replica in their own rack
        (KIP-392), when the cluster was given racks."""
        if self.racks is None:
            return {}
        return {
            "broker.rack": self.racks[node.node_id - 1],
            "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
        }

    def _secured_properties(self, node: _Node) -> dict[str, str]:
        """The secured listeners beside PLAINTEXT and CONTROLLER (none if not secured)."""
        if self.secured is None:
            return {}
        plain = node_properties(node, "", self.brokers, self.host)
        extra = f"SASL_SSL://127.0.0.1:{node.sasl_port},SSL://127.0.0.1:{node.mtls_port}"
        return {
            **self.secured.node_properties(node.sasl_port, node.mtls_port),
            "listeners": f"{plain['listeners']},{extra}",
            "advertised.listeners": f"{plain['advertised.listeners']},{extra}",
            "listener.security.protocol.map": (
                f"{plain['listener.security.protocol.map']},SASL_SSL:SASL_SSL,SSL:SSL"
            ),
        }

    @property
    def sasl_bootstrap_servers(self) -> str:
        """The SASL_SSL (SCRAM) listeners, when the cluster is secured."""
        return ",".join(f"127.0.0.1:{n.sasl_port}" for n in self._nodes if n.sasl_port)

    @property
    def mtls_bootstrap_servers(self) -> str:
        """The mutual-TLS listeners, when the cluster is secured."""
        return ",".join(f"127.0.0.1:{n.mtls_port}" for n in self._nodes if n.mtls_port)

    def _memory_options(self) -> tuple[str, ...]:
        tracking = ("-XX:NativeMemoryTracking=summary",) if self.native_memory_tracking else ()
        heap: tuple[str, ...]
        if self.heap_committed:
            heap = (f"-Xms{self.heap_mb}m", f"-Xmx{self.heap_mb}m", "-XX:+AlwaysPreTouch")
        else:
            heap = (f"-Xms{min(self.heap_mb, 256)}m", f"-Xmx{self.heap_mb}m")
        return heap + tracking

    def _launch(self, node: _Node) -> None:
        with node.log_path.open("ab") as log:
            node.process = subprocess.Popen(
                [
                    self._java,
                    *self._memory_options(),
                    *_JVM_OPTIONS,
                    f"-Dlog4j2.configurationFile={node.directory / 'log4j2.yaml'}",
                    "-cp",
                    self._classpath,
                    "kafka.Kafka",
                    str(node.config_path),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C in the terminal is ours to forward
            )

    def admin_client(self) -> Any:
        """A confluent-kafka AdminClient on the PLAINTEXT listener (the harness's door)."""
        if self._admin is None:
            self._admin = _admin_for(self.bootstrap_servers)
        return self._admin

    def _wait_ready(self, node_ids: set[int], deadline: float) -> None:
        """Wait until each node in ``node_ids`` answers on its own listener and counts itself
        among the cluster's live (unfenced) brokers."""
        waiting = {n.node_id: n for n in self._nodes if n.node_id in node_ids}
        # One client per node for the whole wait (each is a librdkafka handle with threads).
        admins = {i: _admin_for(f"{self.host}:{n.broker_port}") for i, n in waiting.items()}
        while waiting:
            for node_id, node in list(waiting.items()):
                code = node.process.poll() if node.process is not None else -1
                if code is not None:
                    raise EmbeddedKafkaError(
                        f"Apache Kafka node {node_id} exited with {code}:\n{node.log_tail()}"
                    )
                try:
                    cluster = admins[node_id].describe_cluster(request_timeout=2).result(5)
                    if node_id in {int(n.id) for n in cluster.nodes}:
                        del waiting[node_id]
                except Exception:  # refused or timed out while the node comes up
                    pass
            if not waiting:
                return
            if time.monotonic() > deadline:
                tails = "\n".join(f"node {n.node_id}:\n{n.log_tail()}" for n in waiting.values())
                raise EmbeddedKafkaError(
                    f"Apache Kafka nodes {sorted(waiting)} not ready in time:\n{tails}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop every node (SIGTERM, then kill after a grace period) and delete its data."""
        nodes, self._nodes = self._nodes, []
        for node in nodes:
            _signal(node, signal.SIGTERM)
        for node in nodes:
            _reap(node, _STOP_TIMEOUT_S)
        self._bootstrap = None
        self._admin = None
        if self._owns_work_dir and self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
            self._work_dir = None

    @property
    def running(self) -> bool:
        """Whether the cluster is started."""
        return bool(self._nodes)

    @property
    def version(self) -> str:
        """The Apache Kafka version these nodes run."""
        return kafka_version()

    # operations ------------------------------------------------------------------------
    def _node(self, broker_id: int) -> _Node:
        if not self._nodes:
            raise EmbeddedKafkaError("Apache Kafka is not started: call start() first")
        if not isinstance(broker_id, int) or not 1 <= broker_id <= len(self._nodes):
            raise ValueError(f"broker_id must be in [1, {len(self._nodes)}], got {broker_id!r}")
        return self._nodes[broker_id - 1]

    def node_log(self, broker_id: int) -> str:
        """Everything node ``broker_id`` has logged so far (warnings and errors, and our broker
        assignor's lines)."""
        try:
            return self._node(broker_id).log_path.read_text(errors="replace")
        except OSError:
            return ""

    def node_pid(self, broker_id: int) -> int | None:
        """Process id of a running node, or None if it is down."""
        node = self._node(broker_id)
        if node.process is None or node.process.poll() is not None:
            return None
        return node.process.pid

    def create_topic(self, name: str, partitions: int, replication: int = 1) -> None:
        """Create ``name`` through the CreateTopics API and wait until every partition has a
        leader."""
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        check_new_topic(name, partitions, replication, self.brokers)
        admin = self.admin_client()
        futures = admin.create_topics([NewTopic(name, partitions, replication)])
        try:
            futures[name].result(timeout=30)
        except Exception as exc:
            raise EmbeddedKafkaError(f"create_topic({name!r}) failed: {exc}") from None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            metadata = admin.list_topics(topic=name, timeout=5).topics.get(name)
            if (
                metadata is not None
                and metadata.error is None
                and len(metadata.partitions) == partitions
                and all(p.leader >= 0 for p in metadata.partitions.values())
            ):
                return
            time.sleep(0.05)
        raise EmbeddedKafkaError(f"create_topic({name!r}): partitions have no leader after 30 s")

    def broker_down(self, broker_id: int) -> None:
        """kill -9 one node: its connections drop at once; its data stays for broker_up."""
        node = self._node(broker_id)
        _signal(node, signal.SIGKILL)
        _reap(node, _STOP_TIMEOUT_S)

    def broker_stop(self, broker_id: int) -> None:
        """Stop one node cleanly (SIGTERM: leadership moves, logs are flushed)."""
        node = self._node(broker_id)
        _signal(node, signal.SIGTERM)
        _reap(node, _STOP_TIMEOUT_S)

    def broker_up(self, broker_id: int) -> None:
        """Restart a node that is down on its data, and wait until it serves again."""
        node = self._node(broker_id)
        if node.process is not None and node.process.poll() is None:
            return
        self._launch(node)
        self._wait_ready({broker_id}, time.monotonic() + _READY_TIMEOUT_S)


def _admin_for(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def _signal(node: _Node, sig: signal.Signals) -> None:
    if node.process is not None and node.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            node.process.send_signal(sig)


def _reap(node: _Node, timeout_s: float) -> None:
    process = node.process
    if process is None:
        return
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    node.process = None
