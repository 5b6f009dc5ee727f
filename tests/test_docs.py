"""The README and the docs site stay true: the README is a front door (short, the two
commands first), every relative link resolves, the generated reference pages match the
code, and the README's examples are the ones the suite runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kafka_autoscaler.reference_pages import DOCS, PAGES

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
MARKDOWN = [README, *sorted(DOCS.rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"```python\n(.*?)```", re.S)


def relative_links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text())
    return [
        target
        for target in LINK.findall(text)
        if not re.match(r"[a-z]+:", target) and not target.startswith("#")
    ]


def test_readme_is_a_front_door() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 300
    head = "\n".join(lines[:12])
    assert "make demo" in head and "make test" in head


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    links = relative_links(path)
    broken = [t for t in links if not (path.parent / t.split("#")[0]).resolve().exists()]
    assert broken == []


RUN_CELL = re.compile(
    r"\| \[(?P<machine>\w+), (?P<day>\d\d-\d\d), (?P<code>[0-9a-f]{7})\]"
    r"\((?P<file>benchmarks/results/[\w.]+\.md)\) \|$"
)


def test_every_headline_row_names_the_run_its_file_holds() -> None:
    """Machine, date and code in the README's headline table are those of the result file
    it links (a re-run that replaces the file must update the row)."""
    cells = [m for line in README.read_text().splitlines() if (m := RUN_CELL.search(line))]
    assert len(cells) >= 10
    for cell in cells:
        lines = (ROOT / cell["file"]).read_text().splitlines()
        (header,) = [line for line in lines[:8] if line.startswith("Machine:")]
        assert cell["machine"] in header, (cell["file"], header)
        assert re.search(rf"run \d{{4}}-{cell['day']} .*code {cell['code']}", header), header


def test_the_link_check_sees_links() -> None:
    assert "docs/getting-started.md" in relative_links(README)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_reference_page_matches_the_code(name: str) -> None:
    assert (DOCS / name).read_text() == PAGES[name](), (
        f"docs/{name} is stale: python -m kafka_autoscaler.reference_pages --write"
    )


def test_every_setting_says_what_it_means() -> None:
    page = (DOCS / "configuration.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert len(rows) > 40
    assert all(not line.rstrip().endswith("|  |") for line in rows)


def test_readme_sdk_example_is_the_quickstart_the_suite_runs() -> None:
    blocks = FENCE.findall(README.read_text())
    quickstart = (ROOT / "examples" / "delta_quickstart.py").read_text()
    assert quickstart in blocks


def test_readme_heuristics_example_runs() -> None:
    (block,) = [b for b in FENCE.findall(README.read_text()) if "get_heuristic" in b]
    scope: dict[str, object] = {}
    exec(block, scope)
    assert scope["plan"]


SNIPPET = re.compile(r'^--8<-- "(?P<path>[^"]+)"$')
# Whatever a snippet marker looks like once a formatter has spaced it out ("--8 < --").
MARKER_LIKE = re.compile(r"^\s*-+\s*8\s*<\s*-+")


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_snippet_include_names_a_file_that_exists(path: Path) -> None:
    """A mangled marker renders as text: mkdocs build --strict passed with the quickstart
    page showing ``--8 < --"examples/delta_quickstart.py"`` instead of the code."""
    markers = [line for line in path.read_text().splitlines() if MARKER_LIKE.match(line)]
    found = [SNIPPET.match(line) for line in markers]
    assert all(found), [line for line, m in zip(markers, found, strict=True) if m is None]
    paths = [re.sub(r"(:-?\d*)+$", "", m["path"]) for m in found if m]  # file:start:end
    missing = [p for p in paths if not (ROOT / p).is_file()]
    assert missing == []


def test_the_getting_started_page_includes_the_quickstart() -> None:
    text = (DOCS / "getting-started.md").read_text()
    assert '--8<-- "examples/delta_quickstart.py"' in text
