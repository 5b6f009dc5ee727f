"""Rack-aware packing: fewer bytes fetched across zones at (at most) one more consumer.

Pure, like the rest of :mod:`assignor`. The greedy rule is :class:`RackAwareRepair`; with
``targets=flow_targets`` the moving partitions' racks are decided together by min-cost flow.
"""

from assignor.racks.flow import flow_targets
from assignor.racks.layout import RackLayout, cross_rack_share, cross_rack_speed, layout_problem
from assignor.racks.packing import RACK_AWARE_BASE, RackAwareRepair, RackPlan

__all__ = [
    "RACK_AWARE_BASE",
    "RackAwareRepair",
    "RackLayout",
    "RackPlan",
    "cross_rack_share",
    "cross_rack_speed",
    "flow_targets",
    "layout_problem",
]
