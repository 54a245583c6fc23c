"""``grid docs``: Grid's documentation as installed with the package. The Markdown pages of
the repository's ``docs/`` ship in the wheel as ``grid/docs/*.md`` (in a checkout,
``python/grid/docs`` is a symlink to ``docs/``), so ``--help`` texts can name a page that
every installed copy has: ``grid docs scoring``."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from grid.suggest import unknown_name

EXIT_OK = 0
EXIT_USAGE = 2
SUFFIX = ".md"


def installed_pages() -> dict[str, Traversable]:
    """The installed pages by name (``scoring`` for ``scoring.md``); empty when none is."""
    directory = resources.files("grid") / "docs"
    if not directory.is_dir():
        return {}
    return {
        entry.name.removesuffix(SUFFIX): entry
        for entry in directory.iterdir()
        if entry.name.endswith(SUFFIX) and entry.is_file()
    }


def page_title(page: Traversable) -> str:
    """The page's first level-one heading ("" without one)."""
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line.removeprefix("# ").strip()
    return ""


def register(subparsers: Any) -> None:
    """Add ``grid docs``."""
    parser = subparsers.add_parser(
        "docs",
        help="list or print the documentation installed with Grid",
        description="Without PAGE, list the pages with their titles; with PAGE, print that "
        "page (Markdown). Exit status: 0 printed, 2 no such page.",
    )
    parser.add_argument(
        "page",
        nargs="?",
        metavar="PAGE",
        help="a page as listed, such as 'scoring' (its file name works too)",
    )
    parser.set_defaults(handler=docs_command)


def docs_command(args: argparse.Namespace) -> int:
    pages = installed_pages()
    if not pages:
        print("grid docs: this copy of Grid has no documentation installed", file=sys.stderr)
        return EXIT_USAGE
    if args.page is None:
        width = max(map(len, pages))
        for name in sorted(pages):
            print(f"{name:<{width}}  {page_title(pages[name])}")
        return EXIT_OK
    name = args.page.rpartition("/")[2].removesuffix(SUFFIX)
    page = pages.get(name)
    if page is None:
        message = unknown_name(f"no page {args.page!r}", name, pages, "pages")
        print(f"grid docs: {message}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(page.read_text(encoding="utf-8"))
    return EXIT_OK
