"""Heuristics by name: the one config flag (``--heuristic`` / ``AUTOSCALER_HEURISTIC``)."""

from __future__ import annotations

from assignor.anyfit import ANY_FIT
from assignor.balanced import LagAware, Sticky
from assignor.base import Heuristic
from assignor.modified import MODIFIED_ANY_FIT
from assignor.repair import Repair

DEFAULT_HEURISTIC = "repair"
HEURISTIC_ENV = "AUTOSCALER_HEURISTIC"
"""The environment variable every component reads the heuristic from (flag: --heuristic)."""

_HEURISTICS: dict[str, Heuristic] = {
    **ANY_FIT,
    **MODIFIED_ANY_FIT,
    "lag-aware": LagAware(),
    "sticky": Sticky(),
    "repair": Repair(),
}

HEURISTIC_NAMES: tuple[str, ...] = tuple(_HEURISTICS)


def get_heuristic(name: str) -> Heuristic:
    """The heuristic called ``name`` (case-insensitive); ValueError listing valid names."""
    key = name.strip().lower() if isinstance(name, str) else name
    try:
        return _HEURISTICS[key]
    except (KeyError, TypeError):
        raise ValueError(
            f"heuristic must be one of {', '.join(HEURISTIC_NAMES)}; got {name!r}"
        ) from None
