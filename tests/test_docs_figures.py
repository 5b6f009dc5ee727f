"""The README's headline figures come from the committed results: each row's label (machine,
date, code) is what its results file says, and each figure in bold is in that file (as
written there, or rounded to the digits the README shows). The benchmark pages' tables the
same way: a bold figure in a table row is in a result the page links (or the row, or the
page the row links), and a page's "CPU, N cores, code X, date" line is one of its results'."""

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


BENCHMARK_PAGES = ROOT / "docs" / "benchmarks"
RESULT_LINK = re.compile(r"\]\(\.\./results/([a-z_0-9]+\.md)\)")
PAGE_LINK = re.compile(r"\]\(([a-z0-9-]+\.md)(?:#[a-z0-9-]+)?\)")
PAGE_LABEL = re.compile(
    r"(?P<cpu>AMD EPYC|Intel[^,]*), \d+ cores, code (?P<code>[0-9a-f]{7}\+?), "
    r"\d{4}-(?P<date>\d\d-\d\d)"
)


def linked_results(text: str) -> set[str]:
    """The result files ``text`` links (as a benchmark page does: ../results/X.md)."""
    return set(RESULT_LINK.findall(text))


def results_text(files: set[str]) -> str:
    return "\n".join((ROOT / "benchmarks" / "results" / f).read_text() for f in sorted(files))


def figure_rows() -> list[tuple[str, str]]:
    """(page, table row) for every benchmark page's table row holding a bold figure."""
    return [
        (page.name, line)
        for page in sorted(BENCHMARK_PAGES.glob("*.md"))
        for line in page.read_text().splitlines()
        if line.startswith("|")
        and BOLD.search(line)
        and NUMBER.search(" ".join(BOLD.findall(line)))
    ]


def test_benchmark_pages_have_bold_figures_in_their_tables() -> None:
    assert len(figure_rows()) >= 10


@pytest.mark.parametrize(("page", "line"), figure_rows(), ids=lambda v: v[:40])
def test_a_bold_figure_in_a_benchmark_table_is_in_a_result_it_links(page: str, line: str) -> None:
    text = (BENCHMARK_PAGES / page).read_text()
    files = linked_results(text) | linked_results(line)
    for linked in PAGE_LINK.findall(line):
        files |= linked_results((BENCHMARK_PAGES / linked).read_text())
    assert files, f"{page}: a row with figures, and no result linked"
    results = results_text(files)
    figures = [n for bold in BOLD.findall(line) for n in NUMBER.findall(bold)]
    missing = [f for f in figures if not in_results(f, results)]
    assert not missing, f"{page}: {missing} are in none of {sorted(files)}"


@pytest.mark.parametrize("page", sorted(p.name for p in BENCHMARK_PAGES.glob("*.md")))
def test_a_benchmark_pages_run_label_is_one_of_its_results(page: str) -> None:
    text = (BENCHMARK_PAGES / page).read_text()
    measured = [MEASURED.search(results_text({f})) for f in linked_results(text)]
    for label in PAGE_LABEL.finditer(text):
        assert any(
            m is not None
            and label.group("code") == m.group("code")
            and label.group("date") == m.group("date")
            and label.group("cpu").split()[0] in m.group("machine")
            for m in measured
        ), f"{page}: {label.group(0)!r} is no linked result's machine, code and date"
