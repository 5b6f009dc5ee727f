"""The load index answers every fit rule exactly as a scan in opening order would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from assignor.binpool import EPSILON, BinPool, Fit
from assignor.load_index import LoadIndex
from assignor.types import TopicPartition

# Loads from a few values so that ties between equal loads are common.
LOADS = st.sampled_from([0.0, 0.1, 0.2, 0.30000000000000004, 0.3, 0.5, 0.7, 1.0])
OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["set", "discard"]), st.integers(0, 7), LOADS), max_size=60
)


def scan(loads: dict[str, float], speed: float, bound: float, fit: Fit) -> str | None:
    """The fit rules as the original linear scan in opening order."""
    chosen: str | None = None
    for bin_id, load in loads.items():
        if load + speed > bound:
            continue
        if fit is Fit.FIRST:
            return bin_id
        if chosen is None or (
            (fit is Fit.BEST and load > loads[chosen])
            or (fit is Fit.WORST and load < loads[chosen])
        ):
            chosen = bin_id
    return chosen


@settings(max_examples=300, deadline=None)
@given(OPERATIONS, st.sampled_from([0.0, 0.1, 0.2, 0.5, 0.8]), st.sampled_from([0.5, 1.0]))
def test_fit_rules_match_a_scan(
    operations: list[tuple[str, int, float]], speed: float, bound: float
) -> None:
    index = LoadIndex()
    loads: dict[str, float] = {}  # in opening order, as the index should see it
    orders: dict[str, int] = {}
    opened = 0
    for action, number, load in operations:
        bin_id = f"b{number}"
        if action == "discard":
            index.discard(bin_id)
            loads.pop(bin_id, None)
            orders.pop(bin_id, None)
            continue
        if bin_id not in orders:
            orders[bin_id], opened = opened, opened + 1
        index.set(bin_id, load, orders[bin_id])
        loads[bin_id] = load
    by_order = dict(sorted(loads.items(), key=lambda item: orders[item[0]]))

    def fits(load: float) -> bool:
        return load + speed <= bound

    assert index.fullest_fitting(fits, bound - speed) == scan(by_order, speed, bound, Fit.BEST)
    assert index.earliest_fitting(fits) == scan(by_order, speed, bound, Fit.FIRST)
    emptiest = index.emptiest()
    expected_worst = scan(by_order, speed, bound, Fit.WORST)
    assert (emptiest if emptiest is not None and fits(loads[emptiest]) else None) == (
        expected_worst
    )
    descending = [b for _, b in index.descending_fitting(fits, bound - speed)]
    fitting = [b for b, load in by_order.items() if fits(load)]
    assert sorted(descending) == sorted(fitting)
    assert [loads[b] for b in descending] == sorted((loads[b] for b in fitting), reverse=True)
    assert len(index) == len(loads)


def test_pool_set_aside_hides_a_bin_from_every_rule() -> None:
    tp = [TopicPartition("t", i) for i in range(3)]
    pool = BinPool(1.0, {tp[0]: 0.5, tp[1]: 0.4, tp[2]: 0.1}, None, {})
    for bin_id in ("c0", "c1"):
        pool.open(bin_id)
    pool.add("c0", tp[0])
    pool.add("c1", tp[1])
    assert pool.choose(0.1, Fit.BEST) == "c0"
    pool.set_aside("c0")
    assert pool.choose(0.1, Fit.BEST) == "c1"
    assert pool.choose(0.1, Fit.FIRST) == "c1"
    assert pool.least_loaded() == "c1"
    pool.restore("c0")
    assert pool.choose(0.1, Fit.BEST) == "c0"
    assert pool.choose(0.6 + EPSILON / 2, Fit.BEST) == "c1"
