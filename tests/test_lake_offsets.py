"""The offsets a lake commit carries (pure codec) and the per-partition claims that fence out
members which lost their partitions (file locks on a directory)."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from consumer_sdk.lake.commit_offsets import (
    CommitOffsets,
    decode_commit,
    earlier_topic_ids,
    encode_offsets,
    stored_offsets,
)
from consumer_sdk.lake.jar_lock import JarLockError, parse_lock, render_lock
from consumer_sdk.lake.partition_fence import (
    PartitionFence,
    StoredOffsets,
    WriteTarget,
    decode_stored,
    encode_stored,
    lost_partitions,
    taken_partitions,
)

ORDERS = WriteTarget("t", "orders", "dead_letters")


def test_offsets_round_trip_through_commit_metadata() -> None:
    text = encode_offsets("orders.v2", {3: 41, 0: 7})
    assert decode_commit(text) == CommitOffsets("orders.v2", {0: 7, 3: 41}, "")


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "compaction by a person",
        "[1, 2]",
        json.dumps({"kafka-autoscaler": {"topic": 5, "offsets": {}}}),
        json.dumps({"kafka-autoscaler": {"topic": "t", "offsets": {"x": 1}}}),
        json.dumps({"kafka-autoscaler": {"topic": "t", "offsets": {"1": -3}}}),
        json.dumps({"kafka-autoscaler": {"topic": "t", "offsets": {"1": True}}}),
        "[" * 100_000,
    ],
)
def test_metadata_that_is_not_ours_is_ignored(text: str | None) -> None:
    assert decode_commit(text) is None


def test_stored_offsets_take_the_highest_per_partition_of_the_topic() -> None:
    history = [
        encode_offsets("t", {0: 10, 1: 5}),
        None,  # an OPTIMIZE commit
        encode_offsets("t", {0: 4}),  # older, listed later
        encode_offsets("other", {0: 99}),
        encode_offsets("t", {2: 0}),
    ]
    assert stored_offsets(history, "t") == {0: 10, 1: 5, 2: 0}


def test_dead_letter_offsets_count_for_the_table_they_were_bound_for() -> None:
    dead_history = [
        encode_offsets("t", {0: 10}, bound_for="orders"),
        encode_offsets("t", {0: 30, 1: 3}, bound_for="orders_archive"),  # another pipeline's
        encode_offsets("t", {1: 2}),  # written before dead letters named their table
    ]
    assert stored_offsets(dead_history, "t", bound_for="orders") == {0: 10, 1: 2}
    assert stored_offsets(dead_history, "t", bound_for="orders_archive") == {0: 30, 1: 3}
    assert decode_commit(dead_history[0]) == CommitOffsets("t", {0: 10}, "orders")


@pytest.mark.parametrize(
    "stored", [StoredOffsets(41, None), StoredOffsets(None, 3), StoredOffsets(0, 0)]
)
def test_a_stored_record_round_trips(stored: StoredOffsets) -> None:
    assert decode_stored(encode_stored(stored)) == stored


def test_offsets_of_an_earlier_topic_of_the_same_name_do_not_count() -> None:
    history = [
        encode_offsets("t", {0: 90, 1: 80}, topic_id="before"),
        encode_offsets("t", {0: 5}, topic_id="now"),
        encode_offsets("t", {1: 3}),  # written before ids were recorded: counts
        encode_offsets("other", {0: 7}, topic_id="x"),
    ]
    assert decode_commit(history[1]) == CommitOffsets("t", {0: 5}, "", "now")
    assert stored_offsets(history, "t", topic_id="now") == {0: 5, 1: 3}
    assert stored_offsets(history, "t") == {0: 90, 1: 80}  # no id known: as before
    assert earlier_topic_ids(history, "t", "now") == {"before"}
    assert earlier_topic_ids(history, "t", "before") == {"now"}
    assert decode_stored(encode_stored(StoredOffsets(4, None, "now"))) == StoredOffsets(
        4, None, "now"
    )
    assert decode_stored('{"rows": 4, "dead": null, "id": 7}') is None


@pytest.mark.parametrize(
    "text",
    [
        encode_stored(None),  # a commit may be landing
        "",
        "{",
        "[1, 2]",
        json.dumps({"rows": 1}),
        json.dumps({"rows": -1, "dead": None}),
        json.dumps({"rows": True, "dead": None}),
        json.dumps({"rows": 1.5, "dead": None}),
        json.dumps({"rows": 1, "dead": None, "more": 2}),
    ],
)
def test_a_record_that_is_not_exact_offsets_reads_as_unknown(text: str) -> None:
    assert decode_stored(text) is None


def test_a_partition_marked_writing_reads_as_unknown_until_its_offsets_are_written(
    tmp_path: Path,
) -> None:
    fence = PartitionFence(tmp_path)
    target = ORDERS
    assert fence.read_stored(target, 0) is None  # never written
    with fence.locked(target, [0, 1]):
        fence.write_stored(target, {0: None, 1: StoredOffsets(7, None)})
    assert fence.read_stored(target, 0) is None
    assert fence.read_stored(target, 1) == StoredOffsets(7, None)
    with fence.locked(target, [0]):
        fence.write_stored(target, {0: StoredOffsets(12, 4)})
    assert fence.read_stored(target, 0) == StoredOffsets(12, 4)
    # The same topic written into another table (or dead-letter table) has no record yet.
    assert fence.read_stored(WriteTarget("t", "orders_v2", "dead_letters"), 1) is None
    assert fence.read_stored(WriteTarget("t", "orders", "orders_dead"), 1) is None


def test_a_record_rewritten_in_place_reads_as_the_last_one_written(tmp_path: Path) -> None:
    # Records are overwritten in one fixed-width write: a shorter record after a longer one
    # must not keep the longer one's tail, and the longest record must fit.
    fence = PartitionFence(tmp_path)
    longest = StoredOffsets(2**63 - 1, 2**63 - 1)
    for stored in [longest, None, StoredOffsets(3, None), StoredOffsets(1234567, 89), None]:
        with fence.locked(ORDERS, [0]):
            fence.write_stored(ORDERS, {0: stored})
        assert fence.read_stored(ORDERS, 0) == stored


def test_a_record_left_by_the_earlier_create_and_rename_is_read_and_overwritten(
    tmp_path: Path,
) -> None:
    fence = PartitionFence(tmp_path)
    with fence.locked(ORDERS, [0]):
        fence.write_stored(ORDERS, {0: StoredOffsets(5, None)})
    path = next(tmp_path.rglob("0.*.stored"))
    path.write_text(encode_stored(StoredOffsets(123456789, 42)))  # unpadded, as before
    assert fence.read_stored(ORDERS, 0) == StoredOffsets(123456789, 42)
    with fence.locked(ORDERS, [0]):
        fence.write_stored(ORDERS, {0: StoredOffsets(7, None)})
    assert fence.read_stored(ORDERS, 0) == StoredOffsets(7, None)


def test_a_claim_by_another_writer_marks_the_partition_lost(tmp_path: Path) -> None:
    fence = PartitionFence(tmp_path)
    first = fence.claim(ORDERS, [0, 1])
    with fence.locked(ORDERS, [0, 1]) as owners:
        assert lost_partitions(first, owners) == set()
    second = fence.claim(ORDERS, [1])
    with fence.locked(ORDERS, [0, 1]) as owners:
        assert lost_partitions(first, owners) == {1}
        assert lost_partitions({1: second[1]}, owners) == {0}  # never claimed 0


def test_a_fence_removed_under_a_writer_is_made_again_and_its_claims_count_as_lost(
    tmp_path: Path,
) -> None:
    fence = PartitionFence(tmp_path / "fences")
    claims = fence.claim(ORDERS, [0])
    shutil.rmtree(tmp_path / "fences")
    with fence.locked(ORDERS, [0]) as owners:
        assert lost_partitions(claims, owners) == {0}  # fenced, not a crash
    assert fence.claim(ORDERS, [0])[0] != claims[0]


def test_claims_of_one_topic_in_two_tables_do_not_fence_each_other(tmp_path: Path) -> None:
    fence = PartitionFence(tmp_path)
    orders = fence.claim(ORDERS, [0, 1])
    archive = fence.claim(WriteTarget("t", "orders_archive", "dead_letters"), [0, 1])
    assert orders != archive
    with fence.locked(ORDERS, [0, 1]) as owners:
        assert lost_partitions(orders, owners) == set()


def test_only_a_writers_latest_claim_overwritten_by_another_counts_as_taken() -> None:
    batch_claims = {0: "mine-1", 1: "mine-1", 2: "mine-1", 3: "mine-2"}
    current = {0: "mine-1", 1: "mine-2", 2: "mine-1", 3: "mine-2"}
    owners = {0: "theirs", 1: "mine-2", 2: "mine-1", 3: "theirs"}
    # 0: my latest claim, overwritten: taken. 1: read under my older claim, which I have
    # replaced: late, not taken. 2: still mine. 3: taken too.
    assert lost_partitions(batch_claims, owners) == {0, 1, 3}
    assert taken_partitions(batch_claims, current, owners) == {0, 3}
    assert taken_partitions({}, {}, {0: "theirs"}) == set()  # never claimed: nothing taken


def _hold_lock(root: str, held: Any, release: Any) -> None:
    with PartitionFence(Path(root)).locked(ORDERS, [0]):
        held.set()
        release.wait(60)
        (Path(root) / "released").write_text("the holder let go after this")


def _hold_gate(root: str, held: Any, release: Any) -> None:
    """What the Delta log store does while it checks and links a commit: the gate's POSIX
    lock (Java's FileLock is one)."""
    gate = os.open(PartitionFence(Path(root)).directory(ORDERS) / "0.gate", os.O_RDWR | os.O_CREAT)
    fcntl.lockf(gate, fcntl.LOCK_EX)
    held.set()
    release.wait(60)
    (Path(root) / "linked").write_text("the commit was linked before the gate opened")
    os.close(gate)


@pytest.mark.parametrize(
    ("hold", "marker"),
    [(_hold_lock, "released"), (_hold_gate, "linked")],
    ids=["a commit holding the partition's lock", "a log store linking a commit at the gate"],
)
def test_a_claim_returns_only_once_a_commit_in_progress_let_go(
    tmp_path: Path, hold: Callable[[str, Any, Any], None], marker: str
) -> None:
    context = multiprocessing.get_context("spawn")
    held, release = context.Event(), context.Event()
    holder = context.Process(target=hold, args=(str(tmp_path), held, release))
    holder.start()
    try:
        assert held.wait(60)
        with ThreadPoolExecutor(1) as pool:
            claiming = pool.submit(PartitionFence(tmp_path).claim, ORDERS, [0])
            release.set()
            claims = claiming.result(60)
        # The commit ended (and let go) before the claim returned; the claim itself was
        # written once the lock was free and before the gate: a commit checking later fails.
        assert (tmp_path / marker).exists()
        assert (tmp_path / "t" / "orders" / "0.owner").read_text() == claims[0]
    finally:
        holder.join(30)
    assert holder.exitcode == 0


def test_a_commit_names_the_claims_its_rows_were_read_under() -> None:
    text = encode_offsets("t", {0: 7}, claims={0: "abc"}, fence="/w/_fences/db/t/orders")
    body = json.loads(text)["kafka-autoscaler"]
    assert body["claims"] == {"0": "abc"} and body["fence"] == "/w/_fences/db/t/orders"
    assert decode_commit(text) == CommitOffsets("t", {0: 7}, "")


def test_lock_files_name_what_resolution_leaves_out() -> None:
    text = "# root g:a:1\n# exclude org.scala-lang:scala-library\ng:a:1 " + "0" * 64 + "\n"
    lock = parse_lock(text)
    assert lock.excludes == ("org.scala-lang:scala-library",)
    assert parse_lock(render_lock(lock, regenerate_command="x")) == lock
    with pytest.raises(JarLockError, match="exclude must be group:artifact"):
        parse_lock("# exclude nonsense\ng:a:1 " + "0" * 64)
