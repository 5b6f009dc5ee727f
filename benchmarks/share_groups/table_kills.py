"""SDK share-group members writing a Delta table while members are killed with -9:
``python -m benchmarks.share_groups.table_kills`` (about 6 minutes; seeded).

Apache Kafka with share groups; a topic of ``PARTITIONS`` partitions written at ``RATE``
records/s for ``--duration`` seconds, one record in ``POISON_EVERY`` not UTF-8 (a dead
letter). ``MEMBERS`` share members (``kafka-autoscaler-consumer`` with
``AUTOSCALER_GROUP_TYPE=share``, the Spark sink, local[1] each) read it. At seeded random
times a random member is killed with SIGKILL and a new one started at once, as a pod's
restart would. A killed member's records that it wrote but did not acknowledge come again
once their acquisition locks expire (30 s), so delivery is at least once underneath.

Figures: records written by the producer, rows and dead letters in the tables (read by
delta-rs), records missing and rows duplicated, how many rows the members' merges found
already there (deliveries the table absorbed), the kills, and when the table caught up.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from benchmarks.support.machine import code_version, machine_line
from benchmarks.support.rate_writer import RateWriter
from benchmarks.support.report import RESULTS, publish
from benchmarks.support.share_members import found_already_there, read_from_the_start
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_tables import table_root
from local_kafka.apache_kafka import ApacheKafka, kafka_version

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4
RATE = 200.0  # records/s over the topic
MEMBERS = 3
DATABASE = "bench"
POISON_EVERY = 101
PNG = RESULTS / "share_table_kills.png"


@dataclass
class Outcome:
    """What the run measured."""

    written: int = 0
    rows: int = 0
    dead_letters: int = 0
    missing: int = 0
    duplicated: int = 0
    found_there: int = 0
    kills: list[float] = field(default_factory=list)
    caught_up_s: float | None = None
    member_exits: list[int | None] = field(default_factory=list)
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # t, written, stored


def keys(root: Path) -> Counter[tuple[int, int]]:
    """(partition, offset) counts of the Delta table at ``root``, read by delta-rs."""
    try:
        table = DeltaTable(str(root)).to_pyarrow_table(columns=["partition", "offset"])
    except TableNotFoundError:  # not created yet
        return Counter()
    pairs = zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True)
    return Counter(pairs)


def distinct_rows(root: Path) -> int:
    """How many distinct (partition, offset) the table at ``root`` holds."""
    return len(keys(root))


class Members:
    """Share members as processes, each logging to a file of its own."""

    def __init__(self, bootstrap: str, group: str, topic: str, work: Path) -> None:
        self.bootstrap, self.group, self.topic, self.work = bootstrap, group, topic, work
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.exits: list[int | None] = []
        self._started = 0

    def start(self) -> None:
        name = f"member-{self._started}"
        self._started += 1
        env = {
            **os.environ,
            "AUTOSCALER_BOOTSTRAP_SERVERS": self.bootstrap,
            "AUTOSCALER_GROUP": self.group,
            "AUTOSCALER_TOPICS": self.topic,
            "AUTOSCALER_CAPACITY": "1000",
            "AUTOSCALER_GROUP_TYPE": "share",
            "AUTOSCALER_MEMBER_IDENTITY": name,
            "AUTOSCALER_SPARK_WAREHOUSE": str(self.work / "warehouse"),
            "AUTOSCALER_SPARK_DATABASE": DATABASE,
            "AUTOSCALER_SPARK_VALUE_FORMAT": "text",
            "AUTOSCALER_SPARK_MASTER": "local[1]",
        }
        with (self.work / f"{name}.log").open("ab") as log:
            self.running[name] = subprocess.Popen(
                [sys.executable, "-m", "consumer_sdk.cli", "--sink", "spark"],
                env=env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill_one(self, rng: random.Random) -> str:
        name = rng.choice(sorted(self.running))
        process = self.running.pop(name)
        process.send_signal(signal.SIGKILL)
        self.exits.append(process.wait())
        return name

    def stop_all(self) -> None:
        for process in self.running.values():
            process.send_signal(signal.SIGTERM)
        for process in self.running.values():
            try:
                self.exits.append(process.wait(timeout=120))
            except subprocess.TimeoutExpired:
                process.kill()
                self.exits.append(None)
        self.running.clear()


def run(duration_s: float, seed: int, work: Path) -> Outcome:
    rng = random.Random(seed)
    outcome = Outcome()
    topic = f"share-table-{uuid.uuid4().hex[:8]}"
    tables = SparkSinkConfig(warehouse=str(work / "warehouse"), database=DATABASE)
    table = tables.table_for(topic)
    root, dead_root = table_root(tables, table), table_root(tables, tables.dead_letter_table)
    with ApacheKafka(broker_assignor=True) as kafka:
        bootstrap = kafka.bootstrap_servers
        kafka.create_topic(topic, PARTITIONS, 1)
        group = f"g-{topic}"
        read_from_the_start(bootstrap, group)
        members = Members(bootstrap, group, topic, work)
        for _ in range(MEMBERS):
            members.start()
        writer = RateWriter(bootstrap, topic, [RATE / PARTITIONS] * PARTITIONS, values=value_of)
        started = time.monotonic()
        writer.start()
        next_kill = started + rng.uniform(20, 40)
        try:
            while time.monotonic() - started < duration_s:
                now = time.monotonic()
                if now >= next_kill:
                    members.kill_one(rng)
                    members.start()
                    outcome.kills.append(round(now - started, 1))
                    next_kill = now + rng.uniform(20, 40)
                stored = distinct_rows(root) + distinct_rows(dead_root)
                outcome.samples.append((round(now - started, 1), len(writer.written), stored))
                time.sleep(5)
            writer.finish()
            expected = len(writer.written)
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                stored = distinct_rows(root) + distinct_rows(dead_root)
                outcome.samples.append((round(time.monotonic() - started, 1), expected, stored))
                if stored >= expected:
                    outcome.caught_up_s = round(time.monotonic() - started - duration_s, 1)
                    break
                time.sleep(5)
            # Records a killed member held come again after their locks expire: wait one
            # lock's duration and a poll more, so their merges are in the count.
            time.sleep(40)
        finally:
            members.stop_all()
            if writer.is_alive():
                writer.finish()
        rows, dead = keys(root), keys(dead_root)
        everything = set(rows) | set(dead)
        outcome.written = len(writer.written)
        outcome.rows, outcome.dead_letters = len(rows), len(dead)
        outcome.missing = len(writer.written - everything)
        outcome.duplicated = sum(n - 1 for n in rows.values()) + sum(n - 1 for n in dead.values())
        outcome.found_there = found_already_there(
            work.glob("member-*.log"), {table, tables.dead_letter_table}
        )
        outcome.member_exits = members.exits
    return outcome


def value_of(n: int) -> bytes:
    """The n-th record's value: text, but every ``POISON_EVERY``-th is not UTF-8."""
    return b"\xff\xfe" if n % POISON_EVERY == POISON_EVERY - 1 else b"record %d" % n


def plot(outcome: Outcome, duration_s: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    times = [t for t, _, _ in outcome.samples]
    ax.plot(times, [w for _, w, _ in outcome.samples], label="records written")
    ax.plot(
        times,
        [s for _, _, s in outcome.samples],
        label="distinct records in the tables (rows and dead letters)",
    )
    for i, kill in enumerate(outcome.kills):
        ax.axvline(kill, color="red", linestyle=":", label="member killed (-9)" if i == 0 else None)
    ax.axvline(duration_s, color="grey", linestyle="--", label="writer stops")
    ax.set_xlabel("seconds")
    ax.set_ylabel("records")
    ax.set_title(f"{MEMBERS} SDK share members writing Delta, killed -9 and restarted")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(PNG, dpi=100)


def report(outcome: Outcome, duration_s: float, seed: int) -> str:
    lines = [
        "# SDK share members writing a Delta table under kill -9",
        "",
        machine_line(),
        f"Apache Kafka {kafka_version()} (KRaft, 1 node, share groups), code {code_version()}; "
        f"`python -m benchmarks.share_groups.table_kills --duration {duration_s:g} --seed {seed}`.",
        "",
        f"{PARTITIONS} partitions written at {RATE:g} records/s for {duration_s:g} s, one "
        f"record in {POISON_EVERY} not UTF-8 (dead letter); {MEMBERS} members "
        "(`kafka-autoscaler-consumer`, `AUTOSCALER_GROUP_TYPE=share`, Spark local[1] each); "
        "a random member killed with SIGKILL every 20-40 s and a new one started at once.",
        "",
        "| written | rows | dead letters | missing | duplicated | found already there | "
        "kills | caught up after the writer stopped |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {outcome.written} | {outcome.rows} | {outcome.dead_letters} | {outcome.missing} | "
        f"{outcome.duplicated} | {outcome.found_there} | {len(outcome.kills)} | "
        f"{'not within 300 s' if outcome.caught_up_s is None else f'{outcome.caught_up_s} s'} |",
        "",
        "*found already there*: rows the members' merges skipped because the table held them: "
        "records delivered again (a killed member wrote them and did not acknowledge them).",
        f"Exit codes of the members (kills, then SIGTERM at the end): {outcome.member_exits}.",
        "",
        f"![written and stored over time]({PNG.name})",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of writing")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--work", default="", help="directory for tables and logs (default: temp)")
    parser.add_argument("--no-write", action="store_true", help="print only; commit nothing")
    args = parser.parse_args(argv)
    if args.duration < 30:
        parser.error("--duration must be >= 30 seconds (a kill comes every 20-40 s)")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="share-table-") as temp:
        work = Path(args.work or temp)
        work.mkdir(parents=True, exist_ok=True)
        outcome = run(args.duration, args.seed, work)
    if not args.no_write:
        plot(outcome, args.duration)
    data: dict[str, Any] = {"seed": args.seed, "duration_s": args.duration, **asdict(outcome)}
    publish(
        "share_table_kills",
        report(outcome, args.duration, args.seed),
        data,
        write=not args.no_write,
    )
    return 0 if outcome.missing == 0 and outcome.duplicated == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
