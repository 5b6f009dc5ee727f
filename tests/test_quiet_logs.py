"""The Kafka client's repeated complaints fold into a line a minute; the rest passes."""

from __future__ import annotations

import logging

import pytest

from contract.quiet_logs import RepeatedLines


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def record(name: str, msg: str, *args: object, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_repeated_client_error_is_written_once_a_window_with_how_many_were_held() -> None:
    clock = Clock()
    folding = RepeatedLines(window_s=60, clock=clock)
    template = "Unable connect to node with id %s: %s"
    written = []
    for second in range(0, 130, 2):  # every 2 s for 130 s, the node and error varying
        clock.now = 100.0 + second
        line = record("aiokafka.client", template, second % 3, f"refused {second}")
        if folding.filter(line):
            written.append(line.getMessage())
    assert len(written) == 3  # at 0, 60 and 120 s
    assert written[0] == "Unable connect to node with id 0: refused 0"
    assert (
        written[1] == "Unable connect to node with id 0: refused 60 (and 29 more like it in 60 s)"
    )
    assert written[2].endswith("(and 29 more like it in 60 s)")


def test_other_loggers_other_templates_and_lower_levels_pass_untouched() -> None:
    folding = RepeatedLines(window_s=60, clock=Clock())
    passed = [
        folding.filter(r)
        for r in (
            record("aiokafka.client", "Unable connect to %s", "a"),
            record("aiokafka.client", "Unable to update metadata from %s", "a"),  # another kind
            record("aiokafka.consumer", "Unable connect to %s", "a"),  # another logger
            record("aiokafka.client", "Unable connect to %s", "b", level=logging.INFO),
            record("sidecar.monitor", "monitor: %s", "end offsets unavailable"),
            record("sidecar.monitor", "monitor: %s", "end offsets unavailable"),  # ours: all
            record("aiokafkaish", "x"),  # not a child of aiokafka
            record("aiokafkaish", "x"),
        )
    ]
    assert passed == [True] * 8
    assert not folding.filter(record("aiokafka.client", "Unable connect to %s", "c"))


def test_the_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="window_s must be > 0, got 0"):
        RepeatedLines(window_s=0)
