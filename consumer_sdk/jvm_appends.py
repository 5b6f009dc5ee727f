"""What the Delta and Iceberg file appends share: reaching their Java classes through a local
session's py4j gateway, and remembering per table why it must be written by Spark instead.

Pure bookkeeping beside the two formats' modules (consumer_sdk.delta_files,
consumer_sdk.iceberg_files); the Java side is ``java/kafkaautoscaler/{delta,iceberg}``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

log = logging.getLogger(__name__)


class FilesRefused(Exception):
    """A table refused files written outside Spark at the commit (it changed since it was
    asked): nothing was committed, and Spark may write the same rows instead."""


def java_class(session: Any, name: str) -> Any:
    """The Java class ``name`` (dotted), through the session's py4j gateway."""
    found = session._jvm
    for part in name.split("."):
        found = getattr(found, part)
    return found


def java_array(session: Any, kind: str, values: Sequence[Any]) -> Any:
    """A Java array of ``kind`` (``long``, ``java.lang.String``) holding ``values``."""
    array = session.sparkContext._gateway.new_array(java_class(session, kind), len(values))
    for index, value in enumerate(values):
        array[index] = value
    return array


def java_exception_class(exc: BaseException | None) -> str | None:
    """The class name of the Java exception behind a py4j error, if it is one."""
    java = getattr(exc, "java_exception", None)
    return None if java is None else str(java.getClass().getName())


class Refusals:
    """Per table (a key: its root or identifier), why files written outside Spark may not be
    appended to it (None: they may). Asked once per table and process, again after
    :meth:`forget` (a commit refused because the table changed since); a refusal is logged
    when found."""

    def __init__(self) -> None:
        self._known: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def of(self, key: str, ask: Callable[[], str | None]) -> str | None:
        """The refusal of ``key``, from ``ask()`` the first time."""
        with self._lock:
            if key not in self._known:
                found = ask()
                self._known[key] = found
                if found is not None:
                    log.warning("%s: Spark writes its files: %s", key, found)
            return self._known[key]

    def forget(self, key: str) -> None:
        """Ask again next time."""
        with self._lock:
            self._known.pop(key, None)

    @contextlib.contextmanager
    def committing(self, key: str, refused_class: str) -> Iterator[None]:
        """Around a commit into ``key``: a Java ``refused_class`` thrown in it (the table
        changed since it was asked) is forgotten and raised as :class:`FilesRefused`."""
        try:
            yield
        except Exception as exc:
            if java_exception_class(exc) != refused_class:
                raise
            self.forget(key)
            raise FilesRefused(str(exc).splitlines()[0]) from exc
