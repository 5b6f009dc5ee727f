"""Reading the hashed Python locks (requirements/*.txt, written by ``make lock``) in tests."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "requirements"
# The extras each image's lock is made of (scripts/lock_python.sh).
IMAGE_EXTRAS = {
    "sidecar": ("sidecar", "kubernetes", "keda", "kip848"),
    "consumer": ("consumer", "spark", "share"),
}


@dataclass(frozen=True)
class Pin:
    """One locked package: ``name==version``, its environment marker, its sha256 hashes."""

    requirement: Requirement
    hashes: tuple[str, ...]

    @property
    def name(self) -> str:
        return canonicalize_name(self.requirement.name)

    @property
    def version(self) -> str:
        [specifier] = self.requirement.specifier
        return specifier.version

    def applies(self, environment: dict[str, str] | None = None) -> bool:
        """Whether the marker holds (here, or in ``environment``'s values)."""
        marker = self.requirement.marker
        return marker is None or marker.evaluate(environment)


def read_lock(name: str) -> list[Pin]:
    """The pins of ``requirements/<name>.txt``, continuation lines joined."""
    text = (LOCKS / f"{name}.txt").read_text().replace("\\\n", " ")
    pins = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = line.split(" --")
        hashes = tuple(
            o.strip().removeprefix("hash=sha256:") for o in options if o.startswith("hash=")
        )
        pins.append(Pin(Requirement(spec.strip()), hashes))
    return pins


def project_requirements(*extras: str) -> list[Requirement]:
    """pyproject.toml's base dependencies and those of ``extras``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    return [Requirement(text) for text in wanted]


def all_extras() -> list[str]:
    """Every extra pyproject.toml names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"])
