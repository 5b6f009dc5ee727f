"""The record path's first-use costs are paid before joining (consumer_sdk.warmup)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from consumer_sdk.records.record_columns import decode_records
from consumer_sdk.warmup import sample_batch, warm_record_path


def test_the_sample_batch_decodes_as_a_fetch_would() -> None:
    columns = decode_records("t", 0, sample_batch(), 0)
    assert columns.count == 2
    assert columns.next_offset == 2
    assert columns.batch.column("key").to_pylist() == [b"k", None]


@pytest.mark.parametrize("columnar", [True, False])
def test_warming_runs_a_batch_through_the_record_path(columnar: bool) -> None:
    assert warm_record_path(columnar) == 2


def test_after_warming_the_first_arrow_array_imports_nothing() -> None:
    # pyarrow imports pandas on its first array; that took seconds on the event loop.
    code = (
        "import sys\n"
        "from consumer_sdk.warmup import warm_record_path\n"
        "import pyarrow as pa\n"
        "warm_record_path(True)\n"
        "before = set(sys.modules)\n"
        "pa.array([1, 2])\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
