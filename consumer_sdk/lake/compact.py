"""Compacting lake tables: many small batches make many small files; readers pay per file.

``kafka-autoscaler-compact [--table T ...]`` with the sink's settings (``AUTOSCALER_SPARK_*``,
or ``--warehouse``/``--table-format``/``--database``) rewrites each table's small files into
few large ones through the format's own operation (Delta ``OPTIMIZE``, Iceberg
``rewrite_data_files``), in a commit of its own: readers keep seeing every row once, and the
sink's appends go on meanwhile (neither format makes a compaction conflict with appends).
Parquet tables with the offset ledger are not compacted (their file names carry the ledger's
publish numbers). With ``--every SECONDS`` it compacts every table, then again each period,
until SIGTERM or SIGINT (a failed round is reported and the next one runs on time). The
sink itself compacts each table every ``compact_every_commits`` commits when that is set
(:class:`CompactionBesideAppends`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consumer_sdk import metrics
from consumer_sdk.lake.spark_config import SparkSinkConfig
from consumer_sdk.lake.spark_tables import (
    LAKE_DESCRIPTORS,
    create_table,
    descriptor_path,
    spark_session,
    table_identifier,
    table_root,
)
from consumer_sdk.lake.upkeep import BesideAppends, alone
from contract.errors import first_line
from contract.settings import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Compaction:
    """Data files of one table before and after."""

    table: str
    files_before: int
    files_after: int


def lake_tables(config: SparkSinkConfig) -> list[str]:
    """The tables of ``config``'s format the sink created in its warehouse."""
    base = config.warehouse_path / f"{config.database}.db" / LAKE_DESCRIPTORS
    return sorted(
        path.stem
        for path in base.glob("*.json")
        if json.loads(path.read_text())["format"] == config.table_format
    )


def data_files(session: Any, config: SparkSinkConfig, table: str) -> int:
    """How many data files the table's current version reads."""
    if config.table_format == "delta":
        root = table_root(config, table).as_posix()
        return int(session.sql(f"DESCRIBE DETAIL delta.`{root}`").collect()[0]["numFiles"])
    identifier = table_identifier(config, table)
    return int(session.sql(f"SELECT count(*) AS n FROM {identifier}.files").collect()[0]["n"])


def compact(session: Any, config: SparkSinkConfig, table: str) -> Compaction:
    """Rewrite ``table``'s small files into large ones, in one commit of its format."""
    if config.table_format == "parquet":
        raise ConfigError("table_format parquet: tables with the offset ledger are not compacted")
    root = table_root(config, table)
    if not descriptor_path(root, config.table_format).exists():
        raise ConfigError(f"table {config.database}.{table} was not written by the sink")
    create_table(session, config.database, table, root, config.table_format, config.iceberg_catalog)
    before = data_files(session, config, table)
    if config.table_format == "delta":
        session.sql(f"OPTIMIZE delta.`{root.as_posix()}`").collect()
    else:
        # Iceberg skips a file group of fewer than 5 small files (min-input-files); the
        # sink compacts every N commits, N as small as the user chose, so 2 files are enough.
        session.sql(
            f"CALL `{config.iceberg_catalog}`.system.rewrite_data_files("
            f"table => '{config.database}.{table}', options => map('min-input-files', '2'))"
        ).collect()
    return Compaction(table, before, data_files(session, config, table))


@contextlib.contextmanager
def compacting_alone(config: SparkSinkConfig, table: str) -> Iterator[bool]:
    """Whether this process may compact ``table`` now: at most one compaction of a table at
    a time across the writer processes of its warehouse (a lock on its filesystem, not
    waited for), since two at once conflict and one of them fails."""
    descriptor = descriptor_path(table_root(config, table), config.table_format)
    if not descriptor.exists():  # not the sink's table: compact() says so
        yield True
        return
    with alone(descriptor.with_suffix(".compact.lock")) as held:
        yield held


class CompactionBesideAppends(BesideAppends):
    """Compaction of the tables this process appends to, every ``every`` commits of a
    table, in the upkeep thread: no append waits for it, and neither format makes it
    conflict with the appends (it reads no offsets, and resume reads only the appends'
    commits)."""

    def __init__(self, config: SparkSinkConfig, every: int) -> None:
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        super().__init__("compaction")
        self._config, self._every = config, every
        self.compactions: list[Compaction] = []

    def committed(self, session: Any, table: str) -> None:
        """After an append to ``table``: start its compaction every ``every`` commits
        unless one of it runs (returns at once)."""
        self._start_every(table, self._every, self._run, session, table)

    def _run(self, session: Any, table: str) -> None:
        started = time.monotonic()
        try:
            with compacting_alone(self._config, table) as ours:
                if not ours:  # another writer process compacts it now: theirs is enough
                    log.debug("%s: compacted by another process now; skipped", table)
                    return
                done = compact(session, self._config, table)
        except Exception as exc:  # upkeep only: tried again after the next commits
            metrics.TABLE_COMPACTION_FAILURES.labels(table).inc()
            log.warning(
                "%s: compaction failed (%s: %s); tried again after %d more commits (the table "
                "stays correct, readers only read more files)",
                table,
                type(exc).__name__,
                first_line(exc, lines=2)[:300],
                self._every,
            )
            return
        took = time.monotonic() - started
        self.compactions.append(done)
        metrics.TABLE_COMPACTION_SECONDS.labels(table).observe(took)
        log.info(
            "%s: compacted %d data files into %d beside the appends in %.1f s",
            table,
            done.files_before,
            done.files_after,
            took,
        )


def run_periodically(round_: Callable[[], None], every_s: float, stop: threading.Event) -> int:
    """Run ``round_`` now, then every ``every_s`` seconds until ``stop`` is set; a round
    that fails is reported in one line and the next runs on time. Returns the rounds run."""
    rounds = 0
    while not stop.is_set():
        rounds += 1
        try:
            round_()
        except ConfigError:
            raise  # the settings are wrong: no later round can do better
        except Exception as exc:  # Spark, the file system: the next round may succeed
            print(
                f"kafka-autoscaler-compact: compaction failed ({first_line(exc)}); "
                f"next in {every_s:g} s",
                file=sys.stderr,
            )
        stop.wait(every_s)
    return rounds


def main(argv: Sequence[str] | None = None) -> int:
    """Compact the named tables (default: every table of the format); one line per table."""
    parser = argparse.ArgumentParser(
        prog="kafka-autoscaler-compact",
        description="Rewrite a lake table's small files into large ones (Delta OPTIMIZE, "
        "Iceberg rewrite_data_files). Settings as the sink's: AUTOSCALER_SPARK_* variables, "
        "or the flags below.",
    )
    parser.add_argument("--warehouse", help="AUTOSCALER_SPARK_WAREHOUSE")
    parser.add_argument("--database", help="AUTOSCALER_SPARK_DATABASE (default kafka)")
    parser.add_argument("--table-format", help="AUTOSCALER_SPARK_TABLE_FORMAT (default delta)")
    parser.add_argument("--table", action="append", default=[], help="a table (repeatable)")
    parser.add_argument(
        "--every",
        type=float,
        help="compact again every this many seconds until SIGTERM (default: once)",
    )
    args = parser.parse_args(argv)
    if args.every is not None and not (math.isfinite(args.every) and args.every > 0):
        print(
            f"kafka-autoscaler-compact: --every must be a number of seconds > 0, got "
            f"{args.every!r}",
            file=sys.stderr,
        )
        return 2
    overrides = {
        name: value
        for name, value in (
            ("warehouse", args.warehouse),
            ("database", args.database),
            ("table_format", args.table_format),
        )
        if value is not None
    }
    try:
        config = SparkSinkConfig.from_env(**overrides)
        if not Path(config.warehouse_path).is_dir():
            raise ConfigError(
                f"warehouse (AUTOSCALER_SPARK_WAREHOUSE) must be an existing directory, got "
                f"{config.warehouse!r}"
            )
        session = spark_session(config)

        def compact_all() -> None:
            for table in args.table or lake_tables(config):  # new topics' tables too
                with compacting_alone(config, table) as ours:
                    if not ours:
                        print(f"{config.database}.{table}: compacted by a sink now; skipped")
                        continue
                    done = compact(session, config, table)
                print(
                    f"{config.database}.{done.table}: {done.files_before} -> "
                    f"{done.files_after} files",
                    flush=True,
                )

        if args.every is None:
            compact_all()
            return 0
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        run_periodically(compact_all, args.every, stop)
    except ConfigError as exc:
        print(f"kafka-autoscaler-compact: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
