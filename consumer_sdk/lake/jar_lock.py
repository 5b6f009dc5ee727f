"""Java jars from Maven Central, pinned by a committed lock file and checked by sha256.

A lock file lists one jar a line, ``group:artifact:version sha256``, after ``# root`` lines
naming the coordinates it was resolved from and ``# exclude group:artifact`` lines naming
dependencies left out (ones the runtime already ships, such as pyspark's own jars).
:func:`ensure_jars` brings the listed jars into a cache directory with the Python standard
library (no Maven needed), verifying each digest;
``python -m consumer_sdk.lake.jar_lock regenerate LOCK`` resolves the roots again with Maven and
rewrites the lock.

The cache is ``$KAFKA_AUTOSCALER_CACHE/jars`` (the Makefile points it at ``.cache/`` in the
checkout, which git ignores), else ``~/.cache/kafka-autoscaler/jars``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contract.settings import ConfigError

CACHE_ENV = "KAFKA_AUTOSCALER_CACHE"
REPOSITORY_ENV = "KAFKA_AUTOSCALER_MAVEN_REPOSITORY"
DEFAULT_REPOSITORY = "https://repo1.maven.org/maven2"
LOCK_DIR = Path(__file__).resolve().parent / "locks"
# Delta for Spark 4.1, Iceberg's Spark 4.1 runtime, the SQLite JDBC driver, Spark's Kafka source.
LAKE_LOCK = LOCK_DIR / "spark-lake.lock"
_COORDINATE = re.compile(r"^[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+:[A-Za-z0-9_.+-]+$")
_ARTIFACT = re.compile(r"^[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DOWNLOAD_TIMEOUT_S = 60.0


class JarLockError(RuntimeError):
    """A lock file is malformed, or a jar could not be fetched or failed its checksum."""


@dataclass(frozen=True)
class LockedJar:
    """One pinned jar: Maven coordinates and the sha256 of its file."""

    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def file_name(self) -> str:
        """The jar's file name in the repository and in the cache."""
        return f"{self.artifact}-{self.version}.jar"

    @property
    def repository_path(self) -> str:
        """The jar's path below a Maven repository's root."""
        group_path = self.group.replace(".", "/")
        return f"{group_path}/{self.artifact}/{self.version}/{self.file_name}"

    @property
    def coordinate(self) -> str:
        """``group:artifact:version``."""
        return f"{self.group}:{self.artifact}:{self.version}"


@dataclass(frozen=True)
class JarLock:
    """A parsed lock file: the root coordinates it was resolved from, every jar, and the
    ``group:artifact`` names resolution leaves out."""

    roots: tuple[str, ...]
    jars: tuple[LockedJar, ...]
    excludes: tuple[str, ...] = ()


def parse_lock(text: str, *, source: str = "lock", roots_only: bool = False) -> JarLock:
    """Parse a lock file's text; raise :class:`JarLockError` naming the bad line.
    ``roots_only``: a new lock, its roots not resolved yet, may list no jar."""
    roots: list[str] = []
    excludes: list[str] = []
    directives = (
        ("# root ", _COORDINATE, "group:artifact:version", roots),
        ("# exclude ", _ARTIFACT, "group:artifact", excludes),
    )
    jars: list[LockedJar] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        directive = next((d for d in directives if line.startswith(d[0])), None)
        if directive is not None:
            prefix, pattern, shape, values = directive
            value = line.removeprefix(prefix).strip()
            if not pattern.match(value):
                raise JarLockError(f"{source}:{number}: {prefix[2:-1]} must be {shape}")
            values.append(value)
            continue
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or not _COORDINATE.match(parts[0]) or not _SHA256.match(parts[1]):
            raise JarLockError(
                f"{source}:{number}: expected 'group:artifact:version sha256', got {line!r}"
            )
        group, artifact, version = parts[0].split(":")
        jars.append(LockedJar(group, artifact, version, parts[1]))
    if not jars and not roots_only:
        raise JarLockError(f"{source}: lists no jar")
    return JarLock(tuple(roots), tuple(jars), tuple(excludes))


def render_lock(lock: JarLock, *, regenerate_command: str) -> str:
    """The text of a lock file (roots first, then jars sorted by coordinate)."""
    lines = [
        "# Pinned jars: group:artifact:version sha256. Regenerate with:",
        f"#   {regenerate_command}",
    ]
    lines += [f"# root {root}" for root in lock.roots]
    lines += [f"# exclude {excluded}" for excluded in lock.excludes]
    lines += [f"{jar.coordinate} {jar.sha256}" for jar in sorted(lock.jars, key=_sort_key)]
    return "\n".join(lines) + "\n"


def _sort_key(jar: LockedJar) -> str:
    return jar.coordinate


def read_lock(path: Path, *, roots_only: bool = False) -> JarLock:
    """Read and parse the lock file at ``path`` (``roots_only``: as :func:`parse_lock`)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise JarLockError(f"cannot read lock file {path}: {exc.strerror}") from None
    return parse_lock(text, source=str(path), roots_only=roots_only)


def cache_dir() -> Path:
    """Where jars are cached (see the module docstring)."""
    root = os.environ.get(CACHE_ENV, "").strip()
    base = Path(root) if root else Path.home() / ".cache" / "kafka-autoscaler"
    return base / "jars"


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _verified(path: Path, sha256: str) -> bool:
    """Whether ``path`` holds the jar of that digest. The file is hashed once; a stamp beside
    it then records the digest with the size and modification time it had, so that each
    process start (every consumer opens a Spark session) does not read 80 MiB of jars
    again. A file changed since (another size or time) is hashed again."""
    try:
        if _stamp(path).read_text() == _seen(path, sha256):
            return True
    except OSError:  # no stamp, or no file
        pass
    if not path.is_file() or _sha256_of(path) != sha256:
        return False
    _write_stamp(path, sha256)
    return True


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _seen(path: Path, sha256: str) -> str:
    status = path.stat()
    return f"{sha256} {status.st_size} {status.st_mtime_ns}"


def _write_stamp(path: Path, sha256: str) -> None:
    with contextlib.suppress(OSError):  # a cache we cannot write to is hashed every time
        _stamp(path).write_text(_seen(path, sha256))


def _download(url: str, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=destination.parent, suffix=".part")
    try:
        with (
            os.fdopen(fd, "wb") as out,
            urllib.request.urlopen(url, timeout=_DOWNLOAD_TIMEOUT_S) as response,
        ):
            shutil.copyfileobj(response, out, 1 << 20)
        os.replace(tmp_name, destination)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def ensure_jars(lock: JarLock, directory: Path | None = None) -> list[Path]:
    """Make every locked jar present and verified in ``directory`` (default
    :func:`cache_dir`); return their paths in lock order. Jars already cached with the right
    digest are not fetched again; a cached file with another digest is fetched anew."""
    target = directory if directory is not None else cache_dir()
    repository = os.environ.get(REPOSITORY_ENV, "").strip() or DEFAULT_REPOSITORY
    paths: list[Path] = []
    for jar in lock.jars:
        path = target / jar.group / jar.file_name
        if not _verified(path, jar.sha256):
            url = f"{repository.rstrip('/')}/{jar.repository_path}"
            try:
                _download(url, path)
            except OSError as exc:
                raise JarLockError(f"cannot fetch {jar.coordinate} from {url}: {exc}") from None
            actual = _sha256_of(path)
            if actual != jar.sha256:
                path.unlink(missing_ok=True)
                raise JarLockError(
                    f"{jar.coordinate}: sha256 {actual} does not match the lock's {jar.sha256}"
                )
            _write_stamp(path, jar.sha256)
        paths.append(path)
    return paths


# Some poms (Spark's) name mirrors of their own; this machine reaches Maven Central only.
_MAVEN_SETTINGS = (
    "<settings><mirrors><mirror><id>central-only</id><mirrorOf>*</mirrorOf>"
    "<url>{}</url></mirror></mirrors></settings>"
)


def lake_jars() -> list[Path]:
    """The locked lake jars in the cache (fetched and verified on first use)."""
    try:
        return ensure_jars(read_lock(LAKE_LOCK))
    except JarLockError as exc:
        raise ConfigError(f"Delta Lake / Iceberg jars unavailable: {exc}") from None


def resolve_with_maven(roots: Sequence[str], excludes: Sequence[str] = ()) -> JarLock:
    """Resolve ``roots`` and their runtime dependencies with Maven, leave out ``excludes``
    (``group:artifact``), and digest every jar."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarLockError("regenerating a lock needs Maven (mvn) on PATH")
    dependencies = "\n".join(
        "<dependency><groupId>{}</groupId><artifactId>{}</artifactId>"
        "<version>{}</version></dependency>".format(*root.split(":"))
        for root in roots
    )
    pom = (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>lock</groupId><artifactId>lock</artifactId><version>0</version>"
        f"<dependencies>{dependencies}</dependencies></project>"
    )
    with tempfile.TemporaryDirectory() as work:
        Path(work, "pom.xml").write_text(pom)
        repository = os.environ.get(REPOSITORY_ENV, "").strip() or DEFAULT_REPOSITORY
        Path(work, "settings.xml").write_text(_MAVEN_SETTINGS.format(repository))
        jars_dir = Path(work, "jars")
        subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-s",
                "settings.xml",
                "dependency:copy-dependencies",
                f"-DoutputDirectory={jars_dir}",
                "-DincludeScope=runtime",
                "-Dmdep.useRepositoryLayout=true",
            ],
            cwd=work,
            check=True,
        )
        jars: list[LockedJar] = []
        for path in sorted(jars_dir.rglob("*.jar")):
            version_dir = path.parent
            artifact_dir = version_dir.parent
            group = str(artifact_dir.parent.relative_to(jars_dir)).replace(os.sep, ".")
            if f"{group}:{artifact_dir.name}" in excludes:
                continue
            jars.append(LockedJar(group, artifact_dir.name, version_dir.name, _sha256_of(path)))
    return JarLock(tuple(roots), tuple(jars), tuple(excludes))


def main(argv: Sequence[str] | None = None) -> int:
    """``fetch LOCK...`` brings locked jars into the cache; ``regenerate LOCK`` re-resolves a
    lock's roots with Maven and rewrites it."""
    parser = argparse.ArgumentParser(
        prog="python -m consumer_sdk.lake.jar_lock",
        description="Fetch pinned jars into the cache, or regenerate a lock file with Maven.",
    )
    parser.add_argument("command", choices=["fetch", "regenerate"])
    parser.add_argument(
        "locks",
        nargs="*",
        type=Path,
        help=f"lock files (default: every *.lock in {LOCK_DIR.name}/)",
    )
    args = parser.parse_args(argv)
    locks: list[Path] = args.locks or sorted(LOCK_DIR.glob("*.lock"))
    try:
        for path in locks:
            lock = read_lock(path, roots_only=args.command == "regenerate")
            if args.command == "fetch":
                paths = ensure_jars(lock)
                size = sum(p.stat().st_size for p in paths)
                print(f"{path.name}: {len(paths)} jars, {size / 2**20:.1f} MiB in {cache_dir()}")
            else:
                if not lock.roots:
                    raise JarLockError(f"{path}: has no '# root' line to resolve from")
                fresh = resolve_with_maven(lock.roots, lock.excludes)
                command = f"python -m consumer_sdk.lake.jar_lock regenerate {path.as_posix()}"
                path.write_text(render_lock(fresh, regenerate_command=command))
                print(f"{path.name}: {len(fresh.jars)} jars locked")
    except (JarLockError, subprocess.CalledProcessError) as exc:
        print(f"jar_lock: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
