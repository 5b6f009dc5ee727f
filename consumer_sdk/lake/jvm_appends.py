"""What the Delta and Iceberg file appends share: one route to their Java side for both kinds
of session, and remembering per table why it must be written by Spark instead.

Both formats' requests go to ``java/kafkaautoscaler/connect/FileAppendCommand.java`` as JSON:
through the py4j gateway of a local session, or as a command extension through Spark Connect
(to a server that loads that class as a command plugin; answers come back in a key of the
session's configuration). A Connect server without the plugin makes every table a refusal:
Spark writes their files, as before the route existed.

Bookkeeping beside the two formats' modules (consumer_sdk.lake.delta.files,
consumer_sdk.lake.iceberg.files); the Java side is ``java/kafkaautoscaler/{delta,iceberg,connect}``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import date
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

    from consumer_sdk.lake.spark_config import SparkSinkConfig

log = logging.getLogger(__name__)

COMMAND_CLASS = "kafkaautoscaler.connect.FileAppendCommand"
COMMAND_TYPE_URL = "type.googleapis.com/kafkaautoscaler.FileAppend"
# What the Java side throws to refuse files at the commit (nothing committed).
DELTA_REFUSED = "kafkaautoscaler.delta.FileAppend$Refused"  # the table changed since asked
ICEBERG_REFUSED = "kafkaautoscaler.iceberg.FileAppend$Refused"
UNSEEN_FILE_REFUSED = COMMAND_CLASS + "$Refused"  # a Connect server does not see the file
REFUSED_CLASSES = frozenset({DELTA_REFUSED, ICEBERG_REFUSED, UNSEEN_FILE_REFUSED})
_REPLY_PREFIX = "kafkaautoscaler.fileAppend.reply."


class FilesRefused(Exception):
    """A table refused files written outside Spark at the commit (it changed since it was
    asked, or the server cannot see them): nothing was committed, and Spark may write the
    same rows instead."""


class FileCommitter(Protocol):
    """What the lake writer asks of each format's file appends (DeltaFileCommitter,
    IcebergFileCommitter)."""

    def write_batch(
        self,
        session: Any,
        config: SparkSinkConfig,
        table: str,
        rows: pa.Table,
        day: date,
        metadata: str,
    ) -> bool:
        """pyarrow writes ``rows`` (no date column) as one file of the ``day`` partition of
        ``table`` and the format commits it with ``metadata``; False when the table refuses
        files (nothing written: Spark writes the rows). Raises :class:`FilesRefused` when the
        commit is refused (nothing committed)."""
        ...


class NoFileAppends(Exception):
    """The session cannot run file appends: a Spark Connect server without the plugin."""


def is_connect(session: Any) -> bool:
    """Whether ``session`` is a Spark Connect session (no JVM of its own)."""
    return getattr(session, "_jsparkSession", None) is None


def run_request(session: Any, request: dict[str, Any]) -> Any:
    """Run one file append request on the session's Java side; its answer (JSON-decoded)."""
    if not is_connect(session):
        from py4j.java_gateway import JavaClass

        command = session._jvm
        for part in COMMAND_CLASS.split("."):
            command = getattr(command, part)
        if not isinstance(command, JavaClass):  # py4j names a missing class a package
            raise NoFileAppends(f"the session does not load {COMMAND_CLASS} (spark.jars)")
        return json.loads(command.run(session._jsparkSession, json.dumps(request)))
    return _run_through_connect(session, request)


def _run_through_connect(session: Any, request: dict[str, Any]) -> Any:
    from pyspark.sql.connect.proto import Command

    key = _REPLY_PREFIX + uuid.uuid4().hex
    command = Command()
    command.extension.type_url = COMMAND_TYPE_URL
    command.extension.value = json.dumps({**request, "reply": key}).encode()
    try:
        session.client.execute_command(command)
    except Exception as exc:
        if _names_no_plugin(exc):
            raise NoFileAppends(
                f"the Spark Connect server does not load {COMMAND_CLASS} "
                "(spark.connect.extensions.command.classes)"
            ) from None
        raise
    try:
        return json.loads(session.conf.get(key))
    finally:
        session.conf.unset(key)


def _names_no_plugin(exc: BaseException) -> bool:
    """Whether a Connect error says no plugin took the command extension."""
    return "No handler found for extension" in str(exc)


def refused_class(exc: BaseException | None) -> str | None:
    """The Java refusal class behind ``exc`` (py4j or Spark Connect), if it is one."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        name = str(java.getClass().getName())
        return name if name in REFUSED_CLASSES else None
    # Spark Connect puts the server's exception class first in the message: "(class) ...".
    text = str(exc)
    return next((name for name in REFUSED_CLASSES if text.startswith(f"({name})")), None)


class Refusals:
    """Per table (a key: its root or identifier), why files written outside Spark may not be
    appended to it (None: they may). Asked once per table and process, again after
    :meth:`forget` (a commit refused because the table changed since); a refusal is logged
    when found."""

    def __init__(self) -> None:
        self._known: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def of(self, key: str, ask: Callable[[], str | None]) -> str | None:
        """The refusal of ``key``, from ``ask()`` the first time (a session that cannot run
        file appends refuses every table)."""
        with self._lock:
            if key not in self._known:
                try:
                    found = ask()
                except NoFileAppends as exc:
                    found = str(exc)
                self._remember(key, found)
            return self._known[key]

    def _remember(self, key: str, found: str | None) -> None:
        """Hold ``found`` as the refusal of ``key`` (the lock held), said once when one."""
        self._known[key] = found
        if found is not None:
            log.warning("%s: Spark writes its files: %s", key, found)

    def forget(self, key: str) -> None:
        """Ask again next time."""
        with self._lock:
            self._known.pop(key, None)

    @contextlib.contextmanager
    def committing(self, key: str) -> Iterator[None]:
        """Around a commit into ``key``: a Java refusal thrown in it (the table changed since
        it was asked) or a session that can no longer run file appends (a Connect server
        restarted without the plugin) is forgotten, so the table is asked again; a server
        that cannot see the file (another file system) becomes the table's refusal. Either
        is raised as :class:`FilesRefused`."""
        try:
            yield
        except Exception as exc:
            found = refused_class(exc)
            if found is None and not isinstance(exc, NoFileAppends):
                raise
            reason = str(exc).splitlines()[0].removeprefix(f"({found}) ")
            if found == UNSEEN_FILE_REFUSED:  # nor will it see the table's next file
                with self._lock:
                    self._remember(key, reason)
            else:
                self.forget(key)
            raise FilesRefused(reason) from exc
