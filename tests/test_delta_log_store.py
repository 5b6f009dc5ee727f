"""The Delta log store's jar: built once from the packaged source into the jar cache."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from consumer_sdk.delta_log_store import (
    LOG_STORE_CLASS,
    ensure_log_store_jar,
    log_store_jar_path,
    log_store_source,
)
from consumer_sdk.lake_session import lake_jars
from contract.settings import ConfigError


def test_the_jar_is_built_once_per_source_and_holds_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = lake_jars()  # the project's cache, before the cache moves
    monkeypatch.setenv("KAFKA_AUTOSCALER_CACHE", str(tmp_path))
    jar = ensure_log_store_jar(locked)
    assert jar == log_store_jar_path(log_store_source())
    assert jar.is_relative_to(tmp_path)
    with zipfile.ZipFile(jar) as archive:
        assert f"{LOG_STORE_CLASS.replace('.', '/')}.class" in archive.namelist()
    built_at = jar.stat().st_mtime_ns
    monkeypatch.setattr("shutil.which", lambda name: None)  # no javac now
    assert ensure_log_store_jar(locked) == jar  # reused, not built again
    assert jar.stat().st_mtime_ns == built_at
    assert log_store_jar_path(log_store_source() + b"\n// changed") != jar


def test_without_javac_the_build_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = lake_jars()
    monkeypatch.setenv("KAFKA_AUTOSCALER_CACHE", str(tmp_path))
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ConfigError, match="javac not found") as failure:
        ensure_log_store_jar(locked)
    assert "\n" not in str(failure.value)
