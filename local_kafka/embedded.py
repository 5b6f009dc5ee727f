"""An embedded Kafka broker: librdkafka's mock cluster, driven through ctypes.

The confluent-kafka wheel bundles librdkafka, whose mock cluster speaks the real Kafka
protocol over TCP (librdkafka uses it for its own tests). Python exposes only the
``test.mock.num.brokers`` client setting, which builds a cluster private to that client;
this module reaches the C API instead so one cluster can serve many clients and processes.

Run it in a process of its own when other processes use it (``kafka-autoscaler-broker``,
:mod:`local_kafka.broker_cli`, prints the bootstrap string): one thread serves all brokers,
data lives in memory, and everything dies with the process. See README "Embedded broker".
"""

from __future__ import annotations

import ctypes
import glob
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from assignor.validation import TOPIC_NAME_RULE, is_integer, is_topic_name

RD_KAFKA_PRODUCER = 0
_ERRSTR_SIZE = 512


class EmbeddedKafkaError(RuntimeError):
    """The mock cluster refused an operation or could not be started."""


def _library_path() -> str:
    """Find the librdkafka shared library that ships inside the confluent-kafka wheel."""
    import confluent_kafka

    package_dir = Path(confluent_kafka.__file__).resolve().parent
    patterns = [
        str(package_dir.parent / "confluent_kafka.libs" / "librdkafka*.so*"),
        str(package_dir / ".dylibs" / "librdkafka*.dylib"),
        str(package_dir / "librdkafka*.so*"),
    ]
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise EmbeddedKafkaError(
        f"librdkafka not found beside confluent_kafka in {package_dir}; "
        "reinstall the confluent-kafka wheel (a source build does not bundle it)"
    )


def _load_library() -> ctypes.CDLL:
    lib = ctypes.CDLL(_library_path())
    vp, cp, i32, i16 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int16
    signatures: dict[str, tuple[list[type], type | None]] = {
        "rd_kafka_conf_new": ([], vp),
        "rd_kafka_conf_set": ([vp, cp, cp, cp, ctypes.c_size_t], ctypes.c_int),
        "rd_kafka_new": ([ctypes.c_int, vp, cp, ctypes.c_size_t], vp),
        "rd_kafka_destroy": ([vp], None),
        "rd_kafka_mock_cluster_new": ([vp, ctypes.c_int], vp),
        "rd_kafka_mock_cluster_destroy": ([vp], None),
        "rd_kafka_mock_cluster_bootstraps": ([vp], cp),
        "rd_kafka_mock_topic_create": ([vp, cp, ctypes.c_int, ctypes.c_int], ctypes.c_int),
        "rd_kafka_mock_broker_set_down": ([vp, i32], ctypes.c_int),
        "rd_kafka_mock_broker_set_up": ([vp, i32], ctypes.c_int),
        "rd_kafka_mock_broker_set_rtt": ([vp, i32, ctypes.c_int], ctypes.c_int),
        "rd_kafka_mock_push_request_errors_array": (
            [vp, i16, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)],
            None,
        ),
        "rd_kafka_mock_group_initial_rebalance_delay_ms": ([vp, i32], None),
        "rd_kafka_mock_set_controller_id": ([vp, i32], ctypes.c_int),
        "rd_kafka_err2str": ([ctypes.c_int], cp),
    }
    for name, (argtypes, restype) in signatures.items():
        function = getattr(lib, name)
        function.argtypes = argtypes
        function.restype = restype
    return lib


def check_new_topic(name: object, partitions: object, replication: object, brokers: int) -> None:
    """What every broker handle checks before creating a topic; ValueError names the field."""
    if not is_topic_name(name):
        raise ValueError(f"name must be a topic name of {TOPIC_NAME_RULE}, got {name!r}")
    if not is_integer(partitions) or not 1 <= partitions <= 100_000:
        raise ValueError(f"partitions must be in [1, 100000], got {partitions!r}")
    if not is_integer(replication) or not 1 <= replication <= brokers:
        raise ValueError(f"replication must be in [1, {brokers}], got {replication!r}")


class BrokerHandle(ABC):
    """What every broker handle (embedded, embedded in a child process, Apache Kafka) offers:
    start/stop as a context manager, the bootstrap string once started, topic creation and
    taking a broker down and up. Subclasses set ``_bootstrap`` and ``brokers``."""

    brokers: int

    _bootstrap: str | None = None

    @abstractmethod
    def start(self) -> Self:
        """Start the cluster; idempotent. Returns self."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the cluster."""

    @abstractmethod
    def create_topic(self, name: str, partitions: int, replication: int = 1) -> None:
        """Create ``name`` with ``partitions`` partitions and ``replication`` replicas."""

    @abstractmethod
    def broker_down(self, broker_id: int) -> None:
        """Take broker ``broker_id`` (1-based) down abruptly."""

    @abstractmethod
    def broker_up(self, broker_id: int) -> None:
        """Bring broker ``broker_id`` back up."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def bootstrap_servers(self) -> str:
        """Comma-separated ``host:port`` list of the brokers (ports are random per start)."""
        if self._bootstrap is None:
            raise EmbeddedKafkaError("the embedded broker is not started: call start() first")
        return self._bootstrap


class EmbeddedKafka(BrokerHandle):
    """A Kafka-protocol cluster in this process, reachable over TCP on 127.0.0.1.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Broker ids run from
    1 to ``brokers``. Topics must be created with :meth:`create_topic` (the mock has no
    CreateTopics API).
    """

    def __init__(self, brokers: int = 3, *, initial_rebalance_delay_ms: int = 0) -> None:
        if not isinstance(brokers, int) or isinstance(brokers, bool) or not 1 <= brokers <= 64:
            raise ValueError(f"brokers must be an integer in [1, 64], got {brokers!r}")
        if initial_rebalance_delay_ms < 0:
            raise ValueError(
                f"initial_rebalance_delay_ms must be >= 0, got {initial_rebalance_delay_ms!r}"
            )
        self.brokers = brokers
        self._initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self._lib: ctypes.CDLL | None = None
        self._rk: int | None = None
        self._cluster: int | None = None
        self._bootstrap = None

    # lifecycle -------------------------------------------------------------------------
    def start(self) -> Self:
        """Start the cluster; idempotent. Returns self."""
        if self._cluster is not None:
            return self
        lib = _load_library()
        conf = lib.rd_kafka_conf_new()
        errstr = ctypes.create_string_buffer(_ERRSTR_SIZE)
        # The handle only hosts the cluster; keep its own logging quiet.
        lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, _ERRSTR_SIZE)
        rk = lib.rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, _ERRSTR_SIZE)
        if not rk:
            raise EmbeddedKafkaError(f"rd_kafka_new failed: {errstr.value.decode()}")
        cluster = lib.rd_kafka_mock_cluster_new(rk, self.brokers)
        if not cluster:
            lib.rd_kafka_destroy(rk)
            raise EmbeddedKafkaError("rd_kafka_mock_cluster_new failed")
        self._lib, self._rk, self._cluster = lib, rk, cluster
        self._bootstrap = lib.rd_kafka_mock_cluster_bootstraps(cluster).decode()
        lib.rd_kafka_mock_group_initial_rebalance_delay_ms(
            cluster, self._initial_rebalance_delay_ms
        )
        # describe_cluster and admin calls need a controller.
        lib.rd_kafka_mock_set_controller_id(cluster, 1)
        return self

    def stop(self) -> None:
        """Stop the cluster and free it; all topics, data and group state are lost."""
        if self._cluster is None or self._lib is None:
            return
        self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
        self._lib.rd_kafka_destroy(self._rk)
        self._cluster = self._rk = None
        self._bootstrap = None

    @property
    def running(self) -> bool:
        """Whether the cluster is started."""
        return self._cluster is not None

    # accessors -------------------------------------------------------------------------
    def _checked(self) -> tuple[ctypes.CDLL, int]:
        if self._lib is None or self._cluster is None:
            raise EmbeddedKafkaError("the embedded broker is not started: call start() first")
        return self._lib, self._cluster

    def _raise_on_error(self, code: int, what: str) -> None:
        if code != 0:
            lib, _ = self._checked()
            raise EmbeddedKafkaError(f"{what} failed: {lib.rd_kafka_err2str(code).decode()}")

    def _check_broker_id(self, broker_id: int) -> None:
        if not isinstance(broker_id, int) or not 1 <= broker_id <= self.brokers:
            raise ValueError(f"broker_id must be in [1, {self.brokers}], got {broker_id!r}")

    # operations ------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, replication: int = 1) -> None:
        """Create ``name`` with ``partitions`` partitions and ``replication`` replicas."""
        check_new_topic(name, partitions, replication, self.brokers)
        lib, cluster = self._checked()
        code = lib.rd_kafka_mock_topic_create(cluster, name.encode(), partitions, replication)
        self._raise_on_error(code, f"create_topic({name!r})")

    def broker_down(self, broker_id: int) -> None:
        """Take a broker down: its connections close and it refuses new ones."""
        self._check_broker_id(broker_id)
        lib, cluster = self._checked()
        self._raise_on_error(lib.rd_kafka_mock_broker_set_down(cluster, broker_id), "broker_down")

    def broker_up(self, broker_id: int) -> None:
        """Bring a broker back up."""
        self._check_broker_id(broker_id)
        lib, cluster = self._checked()
        self._raise_on_error(lib.rd_kafka_mock_broker_set_up(cluster, broker_id), "broker_up")

    def set_rtt(self, broker_id: int, ms: int) -> None:
        """Delay every response of a broker by ``ms`` milliseconds."""
        self._check_broker_id(broker_id)
        if not isinstance(ms, int) or not 0 <= ms <= 3_600_000:
            raise ValueError(f"ms must be in [0, 3600000], got {ms!r}")
        lib, cluster = self._checked()
        self._raise_on_error(lib.rd_kafka_mock_broker_set_rtt(cluster, broker_id, ms), "set_rtt")

    def push_request_errors(self, api_key: int, errors: Sequence[int]) -> None:
        """Make the next ``len(errors)`` requests of ``api_key`` fail with these error codes."""
        if not isinstance(api_key, int) or not 0 <= api_key <= 32767:
            raise ValueError(f"api_key must be in [0, 32767], got {api_key!r}")
        if not errors:
            raise ValueError("errors must hold at least one Kafka error code")
        for code in errors:
            if not isinstance(code, int) or not -200 <= code <= 32767:
                raise ValueError(f"errors must be Kafka error codes in [-200, 32767], got {code!r}")
        lib, cluster = self._checked()
        array = (ctypes.c_int * len(errors))(*errors)
        lib.rd_kafka_mock_push_request_errors_array(cluster, api_key, len(errors), array)
