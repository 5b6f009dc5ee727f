"""Which optional part of the install (a pip extra) a feature needs, and the one line that
says so when it is missing (instead of an ImportError's traceback)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence

Finder = Callable[[str], object | None]


def missing_modules(modules: Sequence[str], find: Finder = importlib.util.find_spec) -> list[str]:
    """The modules of ``modules`` that ``find`` (``importlib.util.find_spec``) cannot find."""
    return [m for m in modules if find(m) is None]


def missing_extra_line(what: str, extra: str, missing: Sequence[str]) -> str:
    """One line: ``what`` needs ``extra``, which modules are missing, and how to install it."""
    return (
        f"{what} needs the '{extra}' extra (missing: {', '.join(missing)}); "
        f"install it with: pip install 'kafka-autoscaler[{extra}]'"
    )
