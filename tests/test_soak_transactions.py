"""The soak's transactional load and its checker: what each transaction's records became,
against what a read_committed reader finds in the log and what the table holds."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from assignor import TopicPartition
from benchmarks.soak.run import records_lines, transaction_figures
from benchmarks.support.transactional_load import (
    TransactionalLoad,
    TransactionOutcomes,
    committed_in_log,
)
from examples.load import RateWalk


def outcomes() -> TransactionOutcomes:
    done = TransactionOutcomes()
    done.add("committed", {(0, 0), (0, 1), (1, 0)})
    done.add("aborted", {(0, 2), (1, 1)})
    done.add("unknown", {(0, 4), (1, 3)})  # the log says: (0, 4) committed, (1, 3) not
    return done


def test_the_figures_say_what_each_transaction_became_and_what_landed_wrongly() -> None:
    in_log = {(0, 0), (0, 1), (1, 0), (0, 4)}
    rows = {(0, 0), (0, 1), (1, 0), (0, 4), (1, 1)}  # one aborted record landed
    figures = transaction_figures(outcomes(), in_log, rows, replaced=1)
    assert figures["transactions"] == {"committed": 1, "aborted": 1, "unknown": 1}
    assert figures["aborted_records"] == 2 and figures["aborted_landed"] == 1
    assert figures["unknown_records"] == 2 and figures["unknown_committed"] == 1
    assert figures["committed_not_in_log"] == 0 and figures["aborted_in_log"] == 0
    assert figures["landed_not_committed"] == 1


def test_the_report_line_names_the_aborted_records_that_landed() -> None:
    in_log = {(0, 0), (0, 1), (1, 0)}
    context = {
        "producer": "transactional",
        "produced": len(in_log),
        "missing": 0,
        "duplicated": 0,
        "failed_sends": 3,
        **transaction_figures(outcomes(), in_log, in_log, replaced=1),
    }
    text = "\n".join(records_lines(context, "delta"))
    assert "3 in committed transactions" in text
    assert "**0 of 2 records of aborted transactions landed**" in text
    assert "1 of unknown outcome" in text and "holds 0 as committed" in text
    counts = {"produced": 5, "missing": 1, "duplicated": 0, "failed_sends": 0}
    plain = records_lines(counts, "delta")
    assert plain == [
        "**Records**: 5 produced, 1 missing, 0 duplicated in the Delta table (read by "
        "delta-rs); 0 sends failed at the producer."
    ]


@pytest.mark.needs_transactions
def test_the_load_commits_and_aborts_and_the_log_holds_just_the_committed(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(2, prefix="soak-txn")
    walk = RateWalk(
        [TopicPartition(topic, p) for p in range(2)], low=40, high=60, delta=0, duration_s=3.5
    )
    load = TransactionalLoad(kafka, walk, abort_every=2, transactional_id=f"test-{topic}")
    load.start()
    load.join(120)
    assert not load.is_alive()
    done = load.outcomes
    assert done.transactions["committed"] >= 1 and done.transactions["aborted"] >= 1
    assert done.committed and done.aborted and not done.unknown
    assert committed_in_log(kafka, topic, 2) == done.committed
    assert {(p, o) for (_, p, o) in load.acked} == done.committed
