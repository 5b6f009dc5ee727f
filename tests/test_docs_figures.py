"""The README's headline figures come from the committed results: each row's label (machine,
date, code) is what its results file says, and each figure in bold is in that file (as
written there, or rounded to the digits the README shows)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
LABEL = re.compile(
    r"\[(?P<cpu>[A-Za-z]+), (?P<date>\d\d-\d\d), (?P<code>[0-9a-f]{7}\+?)\]"
    r"\((?P<path>benchmarks/results/[^)]+\.md)\)"
)
MEASURED = re.compile(
    r"^Machine: (?P<machine>.+?), Python [^;]+; run \d{4}-(?P<date>\d\d-\d\d) [\d:]+ UTC, "
    r"code (?P<code>\S+?)\.$",
    re.M,
)
BOLD = re.compile(r"\*\*([^*]+)\*\*")
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def labelled_rows() -> list[tuple[str, re.Match[str]]]:
    rows = []
    for line in README.read_text().splitlines():
        rows += [(line, found) for found in LABEL.finditer(line)]
    return rows


def _value(text: str) -> float:
    return float(text.replace(",", ""))


def in_results(figure: str, results: str) -> bool:
    """``figure`` is in ``results`` as written, or a number there rounds to it."""
    if figure in results:
        return True
    decimals = len(figure.split(".")[1]) if "." in figure else 0
    wanted = _value(figure)
    return any(
        round(_value(found), decimals) == wanted
        for found in NUMBER.findall(results)
        if found.replace(",", "").replace(".", "").isdigit()
    )


def test_the_readme_cites_results_by_label() -> None:
    assert len(labelled_rows()) >= 10


@pytest.mark.parametrize(
    ("line", "label"), labelled_rows(), ids=lambda v: v.group("path") if hasattr(v, "group") else ""
)
def test_a_rows_label_and_figures_are_its_results_files(line: str, label: re.Match[str]) -> None:
    results = (ROOT / label.group("path")).read_text()
    measured = MEASURED.search(results)
    assert measured is not None, f"{label.group('path')} names no machine, date and code"
    assert label.group("cpu") in measured.group("machine"), measured.group("machine")
    assert label.group("date") == measured.group("date")
    assert label.group("code") == measured.group("code")
    figures = [n for bold in BOLD.findall(line) for n in NUMBER.findall(bold)]
    missing = [f for f in figures if not in_results(f, results)]
    assert not missing, f"{missing} of {label.group('path')} row are not in the file"
