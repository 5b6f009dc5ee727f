"""The file appends' shared bookkeeping (consumer_sdk.lake.jvm_appends) without a JVM: how a
refusal is recognised from either kind of session, and what a session without the Java side
makes of every table. The route itself runs in test_delta_files, test_iceberg_files and
test_spark_sink (through a Connect server with and without the plugin)."""

from __future__ import annotations

import logging

import pytest

from consumer_sdk.lake.jvm_appends import (
    DELTA_REFUSED,
    UNSEEN_FILE_REFUSED,
    FilesRefused,
    NoFileAppends,
    Refusals,
    refused_class,
)


class _JavaClass:
    def __init__(self, name: str) -> None:
        self._name = name

    def getName(self) -> str:  # py4j mirrors the Java method name
        return self._name


class _JavaException:
    def __init__(self, name: str) -> None:
        self._class = _JavaClass(name)

    def getClass(self) -> _JavaClass:
        return self._class


class _Py4JError(Exception):
    def __init__(self, name: str) -> None:
        super().__init__("An error occurred while calling o1.run")
        self.java_exception = _JavaException(name)


@pytest.mark.parametrize(
    ("error", "found"),
    [
        (_Py4JError(DELTA_REFUSED), DELTA_REFUSED),
        (_Py4JError("java.lang.IllegalStateException"), None),
        (
            Exception(f"({UNSEEN_FILE_REFUSED}) the Spark Connect server does not see"),
            UNSEEN_FILE_REFUSED,
        ),
        (Exception(f"({DELTA_REFUSED}) cannot append files"), DELTA_REFUSED),
        # Only Connect's "(class) message" form counts, not a class named in passing.
        (Exception(f"[INTERNAL_ERROR] while handling {DELTA_REFUSED}"), None),
        (Exception("(java.lang.IllegalArgumentException) unknown file append request"), None),
    ],
)
def test_a_refusal_is_known_by_its_java_class_from_either_session(
    error: Exception, found: str | None
) -> None:
    assert refused_class(error) == found


def test_a_refused_commit_is_forgotten_and_raised_as_files_refused() -> None:
    refusals = Refusals()
    asked: list[str] = []

    def ask() -> None:
        asked.append("t")

    assert refusals.of("t", ask) is None and refusals.of("t", ask) is None
    assert asked == ["t"]  # once per table
    for error in (Exception(f"({DELTA_REFUSED}) the table changed"), NoFileAppends("gone")):
        with pytest.raises(FilesRefused), refusals.committing("t"):
            raise error
        refusals.of("t", ask)
    assert asked == ["t", "t", "t"]  # asked again after each refused commit
    with pytest.raises(ValueError, match="other"), refusals.committing("t"):
        raise ValueError("other")  # not a refusal: raised as it is, the answer kept
    refusals.of("t", ask)
    assert len(asked) == 3


def test_a_session_without_the_java_side_refuses_every_table_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    refusals = Refusals()

    def ask() -> str | None:
        raise NoFileAppends("the Spark Connect server does not load the plugin")

    with caplog.at_level(logging.WARNING, logger="consumer_sdk.lake.jvm_appends"):
        for _ in range(3):
            assert refusals.of("t", ask) == "the Spark Connect server does not load the plugin"
    assert [r.getMessage() for r in caplog.records] == [
        "t: Spark writes its files: the Spark Connect server does not load the plugin"
    ]


def test_a_file_the_server_cannot_see_makes_spark_write_that_table_from_then_on() -> None:
    refusals = Refusals()
    assert refusals.of("t", lambda: None) is None
    unseen = f"({UNSEEN_FILE_REFUSED}) the Spark Connect server does not see the data file x"
    refused = pytest.raises(FilesRefused, match=r"^the Spark Connect server does not see")
    with refused, refusals.committing("t"):
        raise Exception(unseen)
    asked: list[str] = []
    assert refusals.of("t", lambda: asked.append("t")) == (
        "the Spark Connect server does not see the data file x"
    )
    assert asked == []  # remembered, not asked again
