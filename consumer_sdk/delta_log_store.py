"""The Delta log store our sessions use for local tables, built once into the jar cache.

Delta commits a table version by creating its ``_delta_log/N.json`` only if no other writer
created it. Its default store for local paths checks that the file is absent and then
renames onto it, and a local rename replaces: two processes committing the same version
between their checks both return success and one commit is silently lost (rows gone,
though its writer recorded their offsets as stored). Delta guards this with a lock inside
one JVM only; every consumer with a local Spark session is a JVM of its own.

``java/kafkaautoscaler/delta/ExclusiveLocalLogStore.java`` links the written commit to its
name instead (``link(2)`` fails if the name exists), so exactly one writer creates each
version and the others retry at the next. It is compiled here against the locked Delta
storage jar and Spark's Hadoop API, into ``<jar cache>/built/`` under a name carrying the
source's digest: built once (``make jars`` does it; otherwise the first session), then
reused. Building needs ``javac`` (a JDK 17).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from consumer_sdk.jar_lock import cache_dir
from contract.settings import ConfigError

LOG_STORE_CLASS = "kafkaautoscaler.delta.ExclusiveLocalLogStore"
# Spark's key naming the log store of a path scheme (Delta's DelegatingLogStore reads it).
LOG_STORE_KEY = "spark.delta.logStore.file.impl"
_SOURCE = ("java", "kafkaautoscaler", "delta", "ExclusiveLocalLogStore.java")
_JAVAC_TIMEOUT_S = 300


def log_store_source() -> bytes:
    """The Java source of the store, as packaged."""
    return resources.files("consumer_sdk").joinpath(*_SOURCE).read_bytes()


def log_store_jar_path(source: bytes) -> Path:
    """Where the jar built from ``source`` lives in the jar cache."""
    digest = hashlib.sha256(source).hexdigest()[:16]
    return cache_dir() / "built" / f"delta-exclusive-local-log-store-{digest}.jar"


def spark_jar_dir() -> Path:
    """The jars of the installed pyspark (Hadoop's client API among them)."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def ensure_log_store_jar(lake_jars: Sequence[Path]) -> Path:
    """The built store's jar, compiled first if the cache lacks it. ``lake_jars``: the locked
    lake jars (Delta's storage jar among them)."""
    source = log_store_source()
    jar = log_store_jar_path(source)
    if jar.is_file():
        return jar
    storage = [path for path in lake_jars if path.name.startswith("delta-storage-")]
    if not storage:
        raise ConfigError("Delta log store: no delta-storage jar among the locked lake jars")
    javac = shutil.which("javac")
    if javac is None:
        raise ConfigError(
            "Delta log store: javac not found; Delta tables written by several processes "
            "need a JDK 17 (for example Debian's openjdk-17-jdk-headless) to build it once"
        )
    classpath = os.pathsep.join([str(storage[0]), str(spark_jar_dir() / "*")])
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent) as work:
        source_file = Path(work, _SOURCE[-1])
        source_file.write_bytes(source)
        classes = Path(work, "classes")
        command = [javac, "--release", "17", "-nowarn", "-cp", classpath, "-d", str(classes)]
        try:
            subprocess.run(
                [*command, str(source_file)],
                check=True,
                capture_output=True,
                text=True,
                timeout=_JAVAC_TIMEOUT_S,
            )
        except subprocess.CalledProcessError as exc:
            first = (exc.stderr or exc.stdout or "").strip().splitlines()[:1]
            raise ConfigError(f"Delta log store: javac failed: {' '.join(first)}") from None
        except subprocess.TimeoutExpired:
            raise ConfigError(f"Delta log store: javac ran over {_JAVAC_TIMEOUT_S} s") from None
        staged = Path(work, jar.name)
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as archive:
            for compiled in sorted(classes.rglob("*.class")):
                archive.write(compiled, compiled.relative_to(classes).as_posix())
        os.replace(staged, jar)  # processes building at once each put a whole, equal jar
    return jar


def main() -> int:
    """Build the store's jar into the cache (``make jars``); print its path."""
    from consumer_sdk.lake_session import lake_jars

    try:
        print(ensure_log_store_jar(lake_jars()))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
