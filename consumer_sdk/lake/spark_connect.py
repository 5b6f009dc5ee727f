"""A local Spark Connect server from the pip pyspark (its bundled Connect jar), bound to
127.0.0.1 only: for tests, benchmarks and trying the ``sc://`` path without a cluster. It
carries the lake jars and catalogs (:mod:`consumer_sdk.lake.lake_session`): Delta and Iceberg
tables work through it as through a local session."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import pyspark

from consumer_sdk.lake.jvm_appends import COMMAND_CLASS
from consumer_sdk.lake.lake_session import lake_conf
from consumer_sdk.lake.spark_tables import DEFAULT_CONF, SESSION_CONF
from contract.local_ports import free_port

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
PLUGIN_KEY = "spark.connect.extensions.command.classes"


class SparkConnectServer:
    """``with SparkConnectServer(warehouse) as server: ... server.url`` (``sc://127.0.0.1:N``)."""

    def __init__(
        self,
        warehouse: Path,
        *,
        master: str = "local[2]",
        driver_memory: str = "4g",
        log_file: Path | None = None,
        iceberg_catalog: str = "lake",
        file_appends: bool = True,
    ) -> None:
        self.warehouse = warehouse
        self.master = master
        # 1g (Spark's default) runs out with 64 MiB Arrow batches from several clients.
        self.driver_memory = driver_memory
        self.port = free_port()
        self.log_file = log_file or warehouse / f"connect-server-{self.port}.log"
        self.iceberg_catalog = iceberg_catalog
        self.file_appends = file_appends  # False: a server as users' own ones without our plugin
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The ``spark_remote`` to give the sink."""
        return f"sc://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the server and wait until it accepts connections."""
        home = Path(pyspark.__file__).parent
        settings = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.sql.warehouse.dir": str(self.warehouse),
            **DEFAULT_CONF,
            **SESSION_CONF,
            **lake_conf(self.warehouse.absolute(), self.iceberg_catalog, {}),
        }
        if self.file_appends:
            # Commits the Delta and Iceberg data files the sink's clients write
            # (consumer_sdk.lake.jvm_appends); its class is in our commit checks jar.
            settings[PLUGIN_KEY] = COMMAND_CLASS
        command = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS]
        command += ["--master", self.master, "--driver-memory", self.driver_memory]
        command += ["--name", "kafka-autoscaler-connect"]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        command.append("spark-internal")
        self.warehouse.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_NO_DAEMONIZE": "1"}
        with self.log_file.open("ab") as log:
            self._process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (code := self._process.poll()) is not None:
                raise RuntimeError(
                    f"Spark Connect server exited with {code}: {self._last_error()}"
                    f" (its log: {self.log_file})"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"Spark Connect server not listening after {timeout_s} s")

    def _last_error(self) -> str:
        """The last line of the server's log that names an error, for the message that
        reports its exit (a CI run once kept only the message)."""
        try:
            lines = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            return "its log cannot be read"
        errors = [line for line in lines if "Exception" in line or "ERROR" in line]
        return (errors or lines or ["its log is empty"])[-1].strip()

    def stop(self) -> None:
        """Stop the server (its JVM and children)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, 15)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(10)

    @property
    def pid(self) -> int | None:
        """The server's process (its JVM), while it runs."""
        return None if self._process is None else self._process.pid

    def kill(self) -> None:
        """Kill the server with SIGKILL (a crash, for fault tests); :meth:`start` brings it
        back on the same port."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait(30)

    def __enter__(self) -> SparkConnectServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
