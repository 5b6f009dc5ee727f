"""contract.errors: a failure told in one line."""

from __future__ import annotations

from contract.errors import first_line

PY4J = (
    "An error occurred while calling o97.expire.\n"
    ": org.apache.iceberg.exceptions.CommitFailedException: metadata changed\n"
    "\tat org.apache.iceberg.BaseTransaction.commit(BaseTransaction.java:1)\n"
)


def test_the_first_line_leaves_the_stack_trace_out() -> None:
    assert first_line(RuntimeError(PY4J)) == "An error occurred while calling o97.expire."


def test_two_lines_join_where_java_was_called_and_what_it_threw() -> None:
    assert first_line(RuntimeError(PY4J), lines=2) == (
        "An error occurred while calling o97.expire.; "
        "org.apache.iceberg.exceptions.CommitFailedException: metadata changed"
    )


def test_an_error_without_a_message_is_its_repr() -> None:
    assert first_line(TimeoutError()) == "TimeoutError()"
    assert first_line(ValueError("  \n "), lines=2) == "ValueError('  \\n ')"
