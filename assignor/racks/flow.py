"""Which rack each moving partition should go to, by min-cost flow (KIP-925's approach).

The greedy rule decides one partition at a time: a partition local to two racks takes room
in whichever has a consumer it fits first, and a later partition local to one of them alone
may find that rack full and cross. The flow decides for all of them at once, on speeds
summed per *class* (the set of racks a partition is local to; at most 2^R - 1 classes), so
the graph has a handful of nodes whatever the partition count:

    source -> class S  (its moving speed)
    class S -> rack r  (cost 0 if r is in S, else 1 per unit: crossing)
    rack r -> sink     (the room left in r's open consumers)
    rack r -> spare    (cost 0) and spare -> sink (the consumers that may still open)
    class S -> sink    (cost 2 per unit: what fits nowhere, left to the greedy rules)

Speeds are in integer units of C / 10,000. The flow's split of each class over racks then
becomes one rack per partition, fastest first, into the rack with the most of the class's
share left, if that holds at least half of the partition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import networkx as nx

from assignor.racks.packing import Room
from assignor.racks.pool import RackPool
from assignor.types import TopicPartition

UNITS_PER_CAPACITY = 10_000
_CROSS, _NOWHERE = 1, 2


def flow_targets(
    pool: RackPool,
    moving: Sequence[TopicPartition],
    racks: Mapping[TopicPartition, frozenset[str]],
    room: Room,
) -> dict[TopicPartition, str]:
    """A rack for each partition of ``moving`` that the flow places (a :data:`TargetRule`)."""
    unit = pool.capacity / UNITS_PER_CAPACITY
    units = {tp: max(1, round(pool.speeds[tp] / unit)) for tp in moving}
    classes: dict[frozenset[str], list[TopicPartition]] = {}
    for tp in moving:
        classes.setdefault(racks[tp], []).append(tp)
    all_racks = sorted(set(pool.rack.values()).union(*classes, room.spare_members))
    free = dict.fromkeys(all_racks, 0)
    for consumer, load in pool.load.items():
        free[pool.rack[consumer]] += max(0, round((room.limit - load) / unit))
    per_consumer = round(room.limit / unit)
    graph: nx.DiGraph[object] = nx.DiGraph()
    total = sum(units.values())
    graph.add_node("source", demand=-total)
    graph.add_node("sink", demand=total)
    graph.add_edge("spare", "sink", capacity=room.new_consumers * per_consumer, weight=0)
    for rack in all_racks:
        spare = room.spare_members.get(rack, 0) * per_consumer
        graph.add_edge(("rack", rack), "sink", capacity=free[rack] + spare, weight=0)
        graph.add_edge(("rack", rack), "spare", weight=0)
    for local, tps in classes.items():
        node = ("class", local)
        graph.add_edge("source", node, capacity=sum(units[tp] for tp in tps), weight=0)
        graph.add_edge(node, "sink", weight=_NOWHERE)
        for rack in all_racks:
            graph.add_edge(node, ("rack", rack), weight=0 if rack in local else _CROSS)
    flow = nx.min_cost_flow(graph)
    targets: dict[TopicPartition, str] = {}
    for local, tps in classes.items():
        share = {r: flow[("class", local)].get(("rack", r), 0) for r in all_racks}
        for tp in tps:  # fastest first, as ``moving`` is
            rack = max(share, key=lambda r: (share[r], r in local, r))
            if 2 * share[rack] < units[tp]:
                continue  # the flow placed less than half of it: left to the greedy rules
            targets[tp] = rack
            share[rack] -= units[tp]
    return targets
