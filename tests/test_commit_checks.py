"""The commit checks' jar: built once from the packaged sources into the jar cache."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from consumer_sdk.lake.commit_checks import (
    ICEBERG_CATALOG_IMPL,
    LOG_STORE_CLASS,
    commit_checks_jar_path,
    ensure_commit_checks_jar,
    java_sources,
)
from consumer_sdk.lake.jar_lock import lake_jars
from consumer_sdk.lake.jvm_appends import COMMAND_CLASS, REFUSED_CLASSES
from contract.settings import ConfigError


def test_the_jar_is_built_once_per_source_and_holds_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = lake_jars()  # the project's cache, before the cache moves
    monkeypatch.setenv("KAFKA_AUTOSCALER_CACHE", str(tmp_path))
    jar = ensure_commit_checks_jar(locked)
    sources = java_sources()
    assert jar == commit_checks_jar_path(sources)
    assert jar.is_relative_to(tmp_path)
    with zipfile.ZipFile(jar) as archive:
        appends = {name.split("$")[0] for name in REFUSED_CLASSES} | REFUSED_CLASSES
        for name in (LOG_STORE_CLASS, ICEBERG_CATALOG_IMPL, COMMAND_CLASS, *appends):
            assert f"{name.replace('.', '/')}.class" in archive.namelist()
    built_at = jar.stat().st_mtime_ns
    monkeypatch.setattr("shutil.which", lambda name: None)  # no javac now
    assert ensure_commit_checks_jar(locked) == jar  # reused, not built again
    assert jar.stat().st_mtime_ns == built_at
    for name in sources:  # any source changed: another jar
        changed = {**sources, name: sources[name] + b"\n// changed"}
        assert commit_checks_jar_path(changed) != jar


def test_without_javac_the_build_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = lake_jars()
    monkeypatch.setenv("KAFKA_AUTOSCALER_CACHE", str(tmp_path))
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ConfigError, match="javac not found") as failure:
        ensure_commit_checks_jar(locked)
    assert "\n" not in str(failure.value)
