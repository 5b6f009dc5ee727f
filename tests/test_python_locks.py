"""The hashed locks (requirements/*.txt) that `make demo`, `make test` and `make images`
install with pip's --require-hashes: they satisfy pyproject.toml (a dependency changed
without `make lock` fails here), every pin carries its hashes, the images' locks hold the
versions the suite runs on, and this suite's own environment is the lock's."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import pytest

from tests.python_locks import IMAGE_EXTRAS, all_extras, project_requirements, read_lock

LOCK_NAMES = ["bootstrap", "dev", *(f"{image}-image" for image in IMAGE_EXTRAS)]


@pytest.mark.parametrize("name", LOCK_NAMES)
def test_every_pin_is_exact_and_hashed(name: str) -> None:
    pins = read_lock(name)
    assert pins, f"requirements/{name}.txt pins nothing"
    for pin in pins:
        assert str(pin.requirement.specifier).startswith("=="), pin.requirement
        assert pin.hashes, f"{pin.requirement} has no sha256 in requirements/{name}.txt"
        assert all(len(digest) == 64 for digest in pin.hashes), pin.requirement


@pytest.mark.parametrize(
    ("name", "extras"),
    [("dev", tuple(all_extras())), *((f"{i}-image", e) for i, e in IMAGE_EXTRAS.items())],
)
def test_the_lock_satisfies_pyproject(name: str, extras: tuple[str, ...]) -> None:
    locked = {pin.name: pin.version for pin in read_lock(name) if pin.applies()}
    for requirement in project_requirements(*extras):
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        pinned = locked.get(requirement.name.lower().replace("_", "-"))
        assert pinned is not None, f"{requirement} is not in requirements/{name}.txt: make lock"
        assert requirement.specifier.contains(pinned, prereleases=True), (
            f"requirements/{name}.txt pins {requirement.name}=={pinned} outside {requirement}:"
            " make lock"
        )


@pytest.mark.parametrize("image", sorted(IMAGE_EXTRAS))
def test_the_images_lock_the_versions_the_suite_runs_on(image: str) -> None:
    dev = {pin.name: pin.version for pin in read_lock("dev")}
    for pin in read_lock(f"{image}-image"):
        assert dev.get(pin.name) == pin.version, (
            f"{image}: {pin.name}=={pin.version}, dev.txt {dev.get(pin.name)}"
        )


def test_this_environment_is_the_lock() -> None:
    """What the suite imports is what the lock names (make rebuilds .venv when it changes)."""
    differing = []
    for pin in read_lock("dev"):
        if not pin.applies():
            continue
        try:
            installed = version(pin.name)
        except PackageNotFoundError:
            installed = "missing"
        if installed != pin.version:
            differing.append(f"{pin.name} {installed} (locked {pin.version})")
    assert not differing, f"not the locked versions: {differing}; run make test to reinstall"
