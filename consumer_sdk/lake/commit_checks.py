"""The Java classes our Spark sessions load to check commits, built once into the jar cache.

Delta commits a table version by creating its ``_delta_log/N.json`` only if no other writer
created it. Its default store for local paths checks that the file is absent and then
renames onto it, and a local rename replaces: two processes committing the same version
between their checks both return success and one commit is silently lost (rows gone,
though its writer recorded their offsets as stored). Delta guards this with a lock inside
one JVM only; every consumer with a local Spark session is a JVM of its own.
``java/kafkaautoscaler/delta/ExclusiveLocalLogStore.java`` links the written commit to its
name instead (``link(2)`` fails if the name exists), so exactly one writer creates each
version and the others retry at the next.

Both formats' commits of the sink name the claims their rows were read under
(:mod:`consumer_sdk.lake.commit_offsets`); the Delta store and Iceberg's JDBC catalog wrapped by
``java/kafkaautoscaler/iceberg/FencedJdbcCatalog.java`` refuse such a commit once another
writer claimed one of its partitions (``java/kafkaautoscaler/fence``): a writer killed with
-9 whose commit a Spark Connect server still runs cannot land rows twice.

``java/kafkaautoscaler/delta/FileAppend.java`` commits data files pyarrow wrote as one Delta
append (:mod:`consumer_sdk.lake.delta.files`).

The sources are compiled here against the locked Delta (storage and Spark) and Iceberg
runtime jars and Spark's own, into ``<jar cache>/built/`` under a name carrying the
sources' digest: built once (``make jars`` does it; otherwise the first session), then
reused. Building needs ``javac`` (a JDK 17).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from consumer_sdk.lake.jar_lock import lake_jars
from consumer_sdk.lake.java_build import (
    build_jar,
    built_jar_path,
    packaged_java_sources,
    print_built_jar,
)
from contract.settings import ConfigError

LOG_STORE_CLASS = "kafkaautoscaler.delta.ExclusiveLocalLogStore"
# Spark's key naming the log store of a path scheme (Delta's DelegatingLogStore reads it).
LOG_STORE_KEY = "spark.delta.logStore.file.impl"
ICEBERG_CATALOG_IMPL = "kafkaautoscaler.iceberg.FencedJdbcCatalog"
_JAR_NAME = "kafka-autoscaler-commit-checks"


def java_sources() -> dict[str, bytes]:
    """The packaged Java sources, by path under ``java/``."""
    return packaged_java_sources("consumer_sdk.lake")


def commit_checks_jar_path(sources: Mapping[str, bytes]) -> Path:
    """Where the jar built from ``sources`` lives in the jar cache."""
    return built_jar_path(_JAR_NAME, sources)


# The lake jars the classes compile against (Spark's own jars besides).
_COMPILE_AGAINST = ("delta-storage-", "delta-spark_", "iceberg-spark-runtime-")


def spark_jar_dir() -> Path:
    """The jars of the installed pyspark (Hadoop's client API among them)."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def ensure_commit_checks_jar(lake_jars: Sequence[Path]) -> Path:
    """The built classes' jar, compiled first if the cache lacks it. ``lake_jars``: the
    locked lake jars (Delta's storage jar and Iceberg's Spark runtime among them)."""
    sources = java_sources()
    jar = commit_checks_jar_path(sources)
    if jar.is_file():
        return jar
    needed = [_one_jar(lake_jars, prefix) for prefix in _COMPILE_AGAINST]
    classpath = [*(str(path) for path in needed), str(spark_jar_dir() / "*")]
    what = "commit checks (Delta and Iceberg tables written by several processes)"
    return build_jar(_JAR_NAME, sources, classpath, what=what)


def _one_jar(jars: Sequence[Path], prefix: str) -> Path:
    found = [path for path in jars if path.name.startswith(prefix)]
    if not found:
        raise ConfigError(f"commit checks: no {prefix}*.jar among the locked lake jars")
    return found[0]


def main() -> int:
    """Build the classes' jar into the cache (``make jars``); print its path."""
    return print_built_jar(lambda: ensure_commit_checks_jar(lake_jars()))


if __name__ == "__main__":
    sys.exit(main())
