"""Java classes of ours compiled once into the jar cache: the packaged ``.java`` sources of a
Python package, built against locked jars into ``<jar cache>/built/<name>-<digest>.jar``.

The digest covers every source, so a changed source builds a new jar and an unchanged one is
reused (``make jars`` builds them ahead). Building needs ``javac`` (a JDK 17).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from consumer_sdk.lake.jar_lock import cache_dir
from contract.settings import ConfigError

_JAVAC_TIMEOUT_S = 300


def packaged_java_sources(package: str, root: str = "java") -> dict[str, bytes]:
    """The ``.java`` files under ``root`` of ``package``, by path under ``root``."""
    found: dict[str, bytes] = {}

    def walk(node: Traversable, prefix: str) -> None:
        for child in node.iterdir():
            if child.is_dir():
                walk(child, f"{prefix}{child.name}/")
            elif child.name.endswith(".java"):
                found[prefix + child.name] = child.read_bytes()

    walk(resources.files(package).joinpath(root), "")
    return dict(sorted(found.items()))


def built_jar_path(name: str, sources: Mapping[str, bytes]) -> Path:
    """Where the jar ``name`` built from ``sources`` lives in the jar cache."""
    digest = hashlib.sha256()
    for path, text in sorted(sources.items()):
        digest.update(path.encode() + b"\0" + hashlib.sha256(text).digest())
    return cache_dir() / "built" / f"{name}-{digest.hexdigest()[:16]}.jar"


def build_jar(
    name: str, sources: Mapping[str, bytes], classpath: Sequence[str], *, what: str
) -> Path:
    """The jar of ``sources`` compiled against ``classpath``, built first if the cache lacks
    it. ``what`` names the classes in the one-line error a failed build raises."""
    jar = built_jar_path(name, sources)
    if jar.is_file():
        return jar
    javac = shutil.which("javac")
    if javac is None:
        raise ConfigError(
            f"{what}: javac not found; building them once needs a JDK 17 (for example "
            "Debian's openjdk-17-jdk-headless)"
        )
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent) as work:
        files = []
        for path, text in sources.items():
            source_file = Path(work, "src", path)
            source_file.parent.mkdir(parents=True, exist_ok=True)
            source_file.write_bytes(text)
            files.append(str(source_file))
        classes = Path(work, "classes")
        command = [javac, "--release", "17", "-nowarn", "-cp", os.pathsep.join(classpath)]
        try:
            subprocess.run(
                [*command, "-d", str(classes), *files],
                check=True,
                capture_output=True,
                text=True,
                timeout=_JAVAC_TIMEOUT_S,
            )
        except subprocess.CalledProcessError as exc:
            first = (exc.stderr or exc.stdout or "").strip().splitlines()[:1]
            raise ConfigError(f"{what}: javac failed: {' '.join(first)}") from None
        except subprocess.TimeoutExpired:
            raise ConfigError(f"{what}: javac ran over {_JAVAC_TIMEOUT_S} s") from None
        staged = Path(work, jar.name)
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as archive:
            for compiled in sorted(classes.rglob("*.class")):
                archive.write(compiled, compiled.relative_to(classes).as_posix())
        os.replace(staged, jar)  # processes building at once each put a whole, equal jar
    return jar


def print_built_jar(build: Callable[[], Path]) -> int:
    """A build command's body: build the jar, print its path (0), or the error in one line (1)."""
    try:
        print(build())
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
