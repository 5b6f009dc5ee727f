"""The jar lock: parsing, rendering, fetching into a cache with sha256 checks."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from consumer_sdk.lake import jar_lock
from consumer_sdk.lake.jar_lock import (
    REPOSITORY_ENV,
    JarLock,
    JarLockError,
    LockedJar,
    ensure_jars,
    parse_lock,
    read_lock,
    render_lock,
)
from local_kafka.kafka_jars import KAFKA_LOCK


def _repository_with(tmp_path: Path, jar: LockedJar, content: bytes) -> Path:
    root = tmp_path / "repo"
    path = root / jar.repository_path
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    return root


def test_committed_kafka_lock_parses_and_names_its_roots() -> None:
    lock = read_lock(KAFKA_LOCK)
    assert any(root.startswith("org.apache.kafka:kafka_2.13:4.") for root in lock.roots)
    coordinates = [jar.coordinate for jar in lock.jars]
    assert len(coordinates) == len(set(coordinates))
    assert any(c.startswith("org.apache.kafka:kafka-clients:") for c in coordinates)


def test_render_and_parse_round_trip() -> None:
    jar = LockedJar("org.example", "thing", "1.2.3", "a" * 64)
    lock = JarLock(("org.example:thing:1.2.3",), (jar,))
    text = render_lock(lock, regenerate_command="regen")
    assert parse_lock(text) == lock
    assert jar.repository_path == "org/example/thing/1.2.3/thing-1.2.3.jar"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "lists no jar"),
        ("org.example:thing:1 nothex\n", "lock:1: expected 'group:artifact:version sha256'"),
        ("org.example:thing " + "a" * 64 + "\n", "lock:1: expected"),
        ("# root not-a-coordinate\norg.x:y:1 " + "a" * 64, "lock:1: root must be"),
    ],
)
def test_malformed_locks_name_the_line(text: str, message: str) -> None:
    with pytest.raises(JarLockError, match=message):
        parse_lock(text)


def test_a_new_lock_of_roots_alone_parses_only_to_be_regenerated() -> None:
    text = "# root org.example:thing:1.2.3\n# exclude org.example:other\n"
    lock = parse_lock(text, roots_only=True)
    assert lock.roots == ("org.example:thing:1.2.3",) and lock.jars == ()
    with pytest.raises(JarLockError, match="lists no jar"):
        parse_lock(text)


def test_fetch_verifies_and_reuses_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    content = b"jar bytes"
    jar = LockedJar("org.example", "thing", "1.0", hashlib.sha256(content).hexdigest())
    repository = _repository_with(tmp_path, jar, content)
    monkeypatch.setenv(REPOSITORY_ENV, repository.as_uri())
    cache = tmp_path / "cache"
    [path] = ensure_jars(JarLock((), (jar,)), cache)
    assert path.read_bytes() == content
    # Cached and verified: the repository is not asked again.
    (repository / jar.repository_path).unlink()
    assert ensure_jars(JarLock((), (jar,)), cache) == [path]
    # A cached file that was tampered with is fetched anew, and fails when it cannot be.
    path.write_bytes(b"tampered")
    with pytest.raises(JarLockError, match=r"cannot fetch org\.example:thing:1\.0"):
        ensure_jars(JarLock((), (jar,)), cache)


def test_a_verified_jar_is_not_hashed_again_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    content = b"jar bytes"
    jar = LockedJar("org.example", "thing", "1.0", hashlib.sha256(content).hexdigest())
    monkeypatch.setenv(REPOSITORY_ENV, _repository_with(tmp_path, jar, content).as_uri())
    cache = tmp_path / "cache"
    [path] = ensure_jars(JarLock((), (jar,)), cache)
    hashed: list[Path] = []
    real = jar_lock._sha256_of

    def counted(file: Path) -> str:
        hashed.append(file)
        return real(file)

    monkeypatch.setattr(jar_lock, "_sha256_of", counted)
    assert ensure_jars(JarLock((), (jar,)), cache) == [path]
    assert hashed == []
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # touched: hashed again
    assert ensure_jars(JarLock((), (jar,)), cache) == [path]
    assert hashed == [path]


def test_a_jar_with_another_digest_is_refused_and_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = LockedJar("org.example", "thing", "1.0", "0" * 64)
    repository = _repository_with(tmp_path, jar, b"something else")
    monkeypatch.setenv(REPOSITORY_ENV, repository.as_uri())
    cache = tmp_path / "cache"
    with pytest.raises(JarLockError, match="does not match the lock"):
        ensure_jars(JarLock((), (jar,)), cache)
    assert not list(cache.rglob("*.jar"))
