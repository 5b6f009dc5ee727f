"""Hand-worked cases that pin each algorithm, the KIP example, members mode and bad input."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from assignor import DEFAULT_HEURISTIC, HEURISTIC_NAMES, TopicPartition, get_heuristic, rscore
from assignor.repair import keep_most


def tps(**speeds: float) -> dict[TopicPartition, float]:
    """``tps(a=6, b=5)`` -> {TopicPartition('t', name-index)...}: one topic, named partitions."""
    return {P[name]: float(value) for name, value in speeds.items()}


NAMES = "abcdefghij"
P = {name: TopicPartition("t", i) for i, name in enumerate(NAMES)}


def groups(assignment: dict[TopicPartition, str]) -> dict[str, set[str]]:
    """Consumer -> names of its partitions."""
    out: dict[str, set[str]] = {}
    for tp, owner in assignment.items():
        out.setdefault(owner, set()).add(NAMES[tp.partition])
    return out


DECREASING = tps(a=6, b=5, c=4, d=3, e=2)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ffd", {"c0": {"a", "c"}, "c1": {"b", "d", "e"}}),
        ("bfd", {"c0": {"a", "c"}, "c1": {"b", "d", "e"}}),
        # worst fit: c (4) joins b (5, emptier); d (3) joins a; e fits in neither (9 + 2 > 10)
        ("wfd", {"c0": {"a", "d"}, "c1": {"b", "c"}, "c2": {"e"}}),
        # next fit: only the last bin is open
        ("nfd", {"c0": {"a"}, "c1": {"b", "c"}, "c2": {"d", "e"}}),
    ],
)
def test_decreasing_any_fit(name: str, expected: dict[str, set[str]]) -> None:
    assert groups(get_heuristic(name).assign(DECREASING, capacity=10)) == expected


ONLINE = tps(a=2, b=5, c=4, d=6, e=3)  # taken in partition order a, b, c, d, e


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # a,b -> c0 (7); c -> c1 (4); d -> c1 (10); e -> c0 (10)
        ("ff", {"c0": {"a", "b", "e"}, "c1": {"c", "d"}}),
        # e (3): c0 at 7 is the only one it fits
        ("bf", {"c0": {"a", "b", "e"}, "c1": {"c", "d"}}),
        # c (4) into c0? 7 + 4 > 10 -> c1; d (6) into c1 (10); e (3) -> c0 (10)
        ("wf", {"c0": {"a", "b", "e"}, "c1": {"c", "d"}}),
        # next fit: c opens c1, d fits c1 (10), e opens c2
        ("nf", {"c0": {"a", "b"}, "c1": {"c", "d"}, "c2": {"e"}}),
    ],
)
def test_online_any_fit(name: str, expected: dict[str, set[str]]) -> None:
    assert groups(get_heuristic(name).assign(ONLINE, capacity=10)) == expected


def test_new_bin_reuses_the_current_consumer_when_not_yet_open() -> None:
    """Sec. IV-C: a partition opening a bin gets its current consumer's id if free."""
    speeds = tps(a=6, b=3, c=6)
    previous = {P["a"]: "x", P["b"]: "x", P["c"]: "x"}
    result = groups(get_heuristic("ffd").assign(speeds, capacity=10, previous=previous))
    # a opens x; c cannot reuse x (open) -> lowest unused c0; b fits x.
    assert result == {"x": {"a", "b"}, "c0": {"c"}}


# Algorithm 1: A{a:5, b:4} (cumulative 9), C{e:7} (7, max 7), B{c:3, d:2} (5, max 3).
WALK_SPEEDS = tps(a=5, b=4, c=3, d=2, e=7)
WALK_PREVIOUS = {P["a"]: "A", P["b"]: "A", P["c"]: "B", P["d"]: "B", P["e"]: "C"}


@pytest.mark.parametrize("name", ["mbf", "mbfp", "mwf", "mwfp"])
def test_modified_any_fit_walk(name: str) -> None:
    # Walk A, C, B (cumulative) or C, A, B (max partition). A and C open with their own
    # partitions. B's smallest (d, 2) moves into C (7 -> 9: the only bin it fits, so best and
    # worst fit agree); c (3) fits nowhere, so B opens and keeps it.
    result = get_heuristic(name).assign(WALK_SPEEDS, capacity=10, previous=WALK_PREVIOUS)
    assert groups(result) == {"A": {"a", "b"}, "C": {"e", "d"}, "B": {"c"}}
    assert rscore(WALK_PREVIOUS, result, WALK_SPEEDS, 10) == pytest.approx(0.2)


def test_modified_best_and_worst_fit_differ_on_where_small_partitions_go() -> None:
    speeds = tps(a=6, b=5, c=1, d=1)
    previous = {P["a"]: "A", P["b"]: "B", P["c"]: "D", P["d"]: "D"}
    # D (cumulative 2) is walked last; its partitions, smallest first (d then c), move out.
    best = groups(get_heuristic("mbf").assign(speeds, capacity=10, previous=previous))
    worst = groups(get_heuristic("mwf").assign(speeds, capacity=10, previous=previous))
    assert best == {"A": {"a", "c", "d"}, "B": {"b"}}  # both into the fullest, A
    assert worst == {"A": {"a", "c"}, "B": {"b", "d"}}  # d to B (5), then c to A (6 vs 6: A first)


def test_modified_any_fit_overflow_goes_to_a_new_consumer() -> None:
    speeds = tps(a=6, b=5)
    previous = {P["a"]: "A", P["b"]: "A"}  # A is at 11 > C
    result = groups(get_heuristic("mbf").assign(speeds, capacity=10, previous=previous))
    # A opens keeping a (biggest first); b overflows and opens the lowest unused id.
    assert result == {"A": {"a"}, "c0": {"b"}}


def test_kip_5337_example() -> None:
    lags = {
        TopicPartition("t0", 0): 100_000.0,
        TopicPartition("t0", 1): 60_000.0,
        TopicPartition("t0", 2): 50_000.0,
    }
    speeds = dict.fromkeys(lags, 1.0)
    result = get_heuristic("lag-aware").assign(speeds, capacity=10, members=["C0", "C1"], lags=lags)
    assert result == {
        TopicPartition("t0", 0): "C0",
        TopicPartition("t0", 1): "C1",
        TopicPartition("t0", 2): "C1",
    }


def test_sticky_balances_counts_and_moves_few() -> None:
    speeds = {TopicPartition("t", i): 1.0 for i in range(6)}
    previous = {tp: f"m{tp.partition % 3}" for tp in speeds}
    result = get_heuristic("sticky").assign(
        speeds, capacity=10, previous=previous, members=["m0", "m1", "m2", "m3"]
    )
    counts = sorted(list(result.values()).count(m) for m in ["m0", "m1", "m2", "m3"])
    assert counts == [1, 1, 2, 2]
    assert sum(previous[tp] != owner for tp, owner in result.items()) == 1  # 2,2,2 -> 2,2,1,1


def test_repair_moves_nothing_when_nothing_changed() -> None:
    speeds = tps(a=6, b=5, c=4, d=3, e=2)
    first = get_heuristic("repair").assign(speeds, capacity=10)
    again = get_heuristic("repair").assign(speeds, capacity=10, previous=first)
    assert again == first


def test_repair_sheds_the_least_speed_from_an_overloaded_consumer() -> None:
    speeds = tps(a=6, b=3, c=2, d=1)  # all on A: 12 > 10
    previous = dict.fromkeys(speeds, "A")
    result = get_heuristic("repair").assign(speeds, capacity=10, previous=previous)
    moved = {NAMES[tp.partition] for tp, owner in result.items() if owner != "A"}
    assert moved == {"c"}  # keeping a, b, d (10) sheds 2: the least possible


def test_repair_consolidates_when_load_drops() -> None:
    speeds = tps(a=2, b=2, c=2)
    previous = {P["a"]: "A", P["b"]: "B", P["c"]: "C"}
    result = get_heuristic("repair").assign(speeds, capacity=10, previous=previous)
    assert len(set(result.values())) == 1
    assert rscore(previous, result, speeds, 10) == pytest.approx(0.4)  # two of three moved


def test_repair_ejects_a_slower_partition_rather_than_open_a_consumer() -> None:
    # A holds 7 + 2 and B 6; new partition n (3) fits neither (A 12, B 9 would fit!).
    speeds = tps(a=7, b=2, c=6, d=3)
    previous = {P["a"]: "A", P["b"]: "A", P["c"]: "B"}
    result = groups(get_heuristic("repair").assign(speeds, capacity=9, previous=previous))
    # d (3) fits in B (6 -> 9) directly: no new consumer.
    assert result == {"A": {"a", "b"}, "B": {"c", "d"}}
    speeds = tps(a=7, b=2, c=6, d=3, e=1)  # e (1) joins too
    previous = {P["a"]: "A", P["b"]: "A", P["c"]: "B", P["e"]: "B"}
    # d (3) fits nowhere (A 9, B 7); B ejects e (1) to ... nowhere either (A at 9) -> A
    # ejects b (2) into B? B at 7 + 2 = 9 leaves no room for d. Then a new consumer opens.
    result = groups(get_heuristic("repair").assign(speeds, capacity=9, previous=previous))
    assert len(result) == 3
    assert result["A"] == {"a", "b"} and result["B"] == {"c", "e"}


def test_keep_most_is_exact_on_small_sets() -> None:
    speeds = tps(a=5, b=4, c=3, d=3)
    kept = {NAMES[tp.partition] for tp in keep_most(list(speeds), speeds, 10)}
    assert sum(speeds[P[n]] for n in kept) == 10  # 4 + 3 + 3; greedy 5 + 4 would keep 9


def test_members_mode_spreads_overload_evenly() -> None:
    speeds = {TopicPartition("t", i): 8.0 for i in range(4)}
    for name in HEURISTIC_NAMES:
        result = get_heuristic(name).assign(speeds, capacity=10, members=["m0", "m1"])
        assert sorted(list(result.values()).count(m) for m in ["m0", "m1"]) == [2, 2], name


def test_members_mode_empties_remove_first_members() -> None:
    speeds = {TopicPartition("t", i): 1.0 for i in range(3)}
    previous = dict.fromkeys(speeds, "pod-2")
    for name in ["repair", "mbf", "ffd"]:
        result = get_heuristic(name).assign(
            speeds,
            capacity=10,
            previous=previous,
            members=["pod-0", "pod-1", "pod-2"],
            remove_first=["pod-2", "pod-1"],
        )
        assert set(result.values()) == {"pod-0"}, name


@pytest.mark.parametrize("name", HEURISTIC_NAMES)
def test_edge_inputs(name: str) -> None:
    heuristic = get_heuristic(name)
    assert heuristic.assign({}, capacity=1) == {}
    one = {TopicPartition("t", 0): 0.0}
    assert set(heuristic.assign(one, capacity=1)) == set(one)
    huge = {TopicPartition("t", 0): 5.0, TopicPartition("t", 1): 0.5}
    result = heuristic.assign(huge, capacity=1)
    assert result[TopicPartition("t", 0)] != result[TopicPartition("t", 1)]


@pytest.mark.parametrize("name", ["repair", "ffd", "mbfp", "sticky"])
def test_thousands_of_partitions(name: str) -> None:
    speeds = {TopicPartition(f"t{i % 7}", i): float((i * 37) % 100) for i in range(3000)}
    result = get_heuristic(name).assign(speeds, capacity=1000)
    assert set(result) == set(speeds)
    used = len(set(result.values()))
    assert used >= math.ceil(sum(speeds.values()) / 1000)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"speeds": {TopicPartition("t", 0): -1.0}}, r"speeds\[t:0\] must be a finite number >= 0"),
        (
            {"speeds": {TopicPartition("t", 0): math.nan}},
            r"speeds\[t:0\] must be a finite number >= 0",
        ),
        ({"capacity": 0}, r"capacity must be a finite number > 0, got 0"),
        ({"capacity": math.inf}, r"capacity must be a finite number > 0"),
        ({"speeds": {("t", -1): 1.0}}, r"speeds keys must be TopicPartition"),
        ({"members": ["a", "a"]}, r"members must be unique"),
        ({"members": []}, r"members must name at least one member"),
        ({"members": ["a"], "remove_first": ["b"]}, r"remove_first names 'b'"),
        ({"remove_first": ["a"]}, r"remove_first needs members"),
        ({"previous": {TopicPartition("t", 0): ""}}, r"previous\[t:0\] must be a non-empty"),
        ({"lags": {TopicPartition("t", 0): -5}}, r"lags\[t:0\] must be a finite number >= 0"),
    ],
)
def test_bad_input_names_the_field(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"speeds": {TopicPartition("t", 0): 1.0}, "capacity": 1.0}
    arguments.update(kwargs)
    speeds = arguments.pop("speeds")
    for name in HEURISTIC_NAMES:
        with pytest.raises(ValueError, match=message):
            get_heuristic(name).assign(speeds, **arguments)  # type: ignore[arg-type]


def test_unknown_heuristic_lists_the_valid_names() -> None:
    with pytest.raises(ValueError, match=r"heuristic must be one of nf, nfd, .*repair"):
        get_heuristic("quantum")
    assert get_heuristic(" MBFP ").name == "mbfp"
    assert DEFAULT_HEURISTIC in HEURISTIC_NAMES


FORBIDDEN = ("aiokafka", "confluent_kafka", "kafka", "pyspark", "kubernetes", "socket", "asyncio")


def test_assignor_imports_no_kafka_and_no_io() -> None:
    code = "import sys, assignor, assignor.registry; print('\\n'.join(sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    bad = [m for m in loaded if m.split(".")[0] in FORBIDDEN]
    assert bad == []
    sources = [
        p for p in (Path(__file__).parent.parent / "assignor").glob("*.py") if p.name != "plugin.py"
    ]
    assert sources
    for source in sources:
        text = source.read_text()
        for module in FORBIDDEN:
            assert f"import {module}" not in text and f"from {module}" not in text, source
