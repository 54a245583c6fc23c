"""``grid docs`` and what points at the documentation (issue 18): every page of ``docs/`` is
installed with the package and listed in the README; no ``--help`` text sends a pip user
to a ``docs/`` file they do not have."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from grid.cli import build_parser
from grid.commands.docs import installed_pages

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted(path.stem for path in (REPO / "docs").glob("*.md"))


def grid(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grid.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_package_serves_every_page_of_docs() -> None:
    # In a checkout python/grid/docs is a symlink to docs/; in the wheel, a copy.
    assert sorted(installed_pages()) == PAGES


def test_grid_docs_lists_the_pages_with_their_titles() -> None:
    finished = grid("docs")
    assert finished.returncode == 0, finished.stderr
    lines = finished.stdout.splitlines()
    assert [line.split()[0] for line in lines] == PAGES
    assert "scoring  " in finished.stdout and "Scoring" in finished.stdout


@pytest.mark.parametrize("spelling", ["scoring", "scoring.md", "docs/scoring.md"])
def test_grid_docs_prints_a_page(spelling: str) -> None:
    finished = grid("docs", spelling)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout == (REPO / "docs" / "scoring.md").read_text(encoding="utf-8")


def test_grid_docs_refuses_an_unknown_page_in_one_line() -> None:
    finished = grid("docs", "scorng")
    assert finished.returncode == 2
    assert finished.stdout == ""
    (line,) = finished.stderr.splitlines()
    assert line.startswith("grid docs: no page 'scorng': did you mean 'scoring'?"), line


def parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield from parsers(child)


def test_no_help_text_points_at_a_docs_file() -> None:
    texts = [
        text
        for parser in parsers(build_parser())
        for text in [
            parser.description,
            parser.epilog,
            *(action.help for action in parser._actions),
        ]
        if text
    ]
    assert len(texts) > 50
    assert not [text for text in texts if re.search(r"\bdocs/|\.md\b", text)]
    named = {page for text in texts for page in re.findall(r"grid docs ([\w-]+)", text)}
    assert named, "the help texts name pages as `grid docs PAGE`"
    assert named <= set(PAGES)


def test_the_readme_links_every_page_of_docs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(docs/([\w-]+)\.md\)", readme))
    assert linked == set(PAGES), f"not linked: {sorted(set(PAGES) - linked)}"
