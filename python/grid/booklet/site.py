"""Builds the booklet: pages, assets and the data Grid's code produced, as files in memory.

The pages are static HTML, CSS and JavaScript written for the booklet (no third-party
code). Data the chapters draw is embedded as scripts that assign to
``window.GRID_BOOKLET`` (a browser refuses ``fetch()`` of a local file, not a
``<script>``), so the booklet opens from ``file://``; served, the scoring chapter also asks
the API for any combination of its sliders.
"""

from __future__ import annotations

import html
import json
import struct
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grid import __version__
from grid.booklet import crdt, scoring, swim

ASSETS_DIR = Path(__file__).resolve().parent / "assets"
STATIC_ASSETS: tuple[str, ...] = (
    "booklet.css",
    "booklet.js",
    "swim.js",
    "crdt.js",
    "scoring.js",
)


@dataclass(frozen=True, slots=True)
class Chapter:
    page: str
    title: str
    summary: str
    data: tuple[str, ...]
    """Data scripts the page loads up front (the SWIM runs load on demand)."""


CHAPTERS: tuple[Chapter, ...] = (
    Chapter(
        "swim.html",
        "SWIM probing",
        "A cluster of Grid's SWIM drivers on a virtual clock: a node joins, one crashes, "
        "messages are lost; step through what the simulator recorded.",
        ("data/swim-index.js",),
    ),
    Chapter(
        "crdt.html",
        "CRDT convergence",
        "Three replicas of Grid's state types: apply adds, removes, register writes and "
        "counter increments, deliver merges in any order, watch them converge.",
        ("data/crdt.js",),
    ),
    Chapter(
        "scoring.html",
        "Scoring pipeline",
        "A mesh's candidates and their six signals: move signals and weights, see "
        "admission, tier and order change, with the numbers grid explain prints.",
        ("data/scoring.js",),
    ),
)


@dataclass(frozen=True, slots=True)
class Site:
    """The built booklet: relative path to content."""

    files: Mapping[str, bytes]
    build_seconds: float

    def chapter_bytes(self, chapter: Chapter) -> int:
        """What opening a chapter loads: its page, the shared and its own assets, its data
        (for SWIM: every recorded run, as the controls can load them all)."""
        own = chapter.page.removesuffix(".html")
        names = {
            chapter.page,
            "favicon.png",
            "booklet.css",
            "booklet.js",
            f"{own}.js",
            *chapter.data,
        }
        if own == "swim":
            names |= {name for name in self.files if name.startswith("data/swim-")}
        return sum(len(self.files[name]) for name in names)


def _data_script(variable: str, value: Any) -> bytes:
    payload = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return f'window.GRID_BOOKLET["{variable}"] = {payload};\n'.encode()


def _swim_script(key: str, trace: Any) -> bytes:
    payload = json.dumps(trace, separators=(",", ":"), allow_nan=False)
    return (
        "(window.GRID_BOOKLET.swimRuns = window.GRID_BOOKLET.swimRuns || {})"
        f'["{key}"] = {payload};\n'
    ).encode()


def _navigation(current: str) -> str:
    links = ['<a class="brand" href="index.html">Grid Booklet</a>']
    for chapter in CHAPTERS:
        here = ' class="here"' if chapter.page == current else ""
        links.append(f'<a{here} href="{chapter.page}">{html.escape(chapter.title)}</a>')
    return "\n    ".join(links)


def _page(name: str, title: str, body: str, scripts: tuple[str, ...]) -> bytes:
    script_tags = "\n".join(f'<script src="{src}"></script>' for src in scripts)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)} · Grid Booklet</title>
<link rel="icon" type="image/png" href="favicon.png">
<link rel="stylesheet" href="booklet.css">
</head>
<body>
<header class="top">
    {_navigation(name)}
</header>
<main>
{body}
<footer>Grid {html.escape(__version__)} · every figure on this page comes from Grid's own
code: see <code>grid docs booklet</code>.</footer>
</main>
{script_tags}
</body>
</html>
""".encode()


def _favicon() -> bytes:
    """A 16x16 PNG: four green members on dark blue."""
    dark, green = b"\x18\x20\x2e", b"\x2e\x9d\x5b"
    rows = b"".join(
        b"\x00"
        + b"".join(green if 2 <= x % 8 <= 5 and 2 <= y % 8 <= 5 else dark for x in range(16))
        for y in range(16)
    )

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body))
            + kind
            + body
            + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _index() -> bytes:
    cards = "\n".join(
        f"""<a class="card panel" href="{chapter.page}">
<h2>{html.escape(chapter.title)}</h2>
<p>{html.escape(chapter.summary)}</p>
</a>"""
        for chapter in CHAPTERS
    )
    body = f"""<h1>The Grid Booklet</h1>
<p class="lead">Grid keeps a mesh of sites in agreement with SWIM membership, replicates its
state as CRDTs and ranks every gateway's backends with a six-signal score. These chapters
show each at work. Nothing is re-implemented in the browser: the SWIM runs were recorded
from Grid's simulator, the CRDT states were computed by Grid's CRDT types and the scores by
Grid's scoring pipeline, the same code <code>grid agent</code> and <code>grid explain</code>
run.</p>
<div class="chapters">
{cards}
</div>
<p class="muted" id="mode-note"></p>"""
    return _page("index.html", "Contents", body, ("booklet.js",))


def build_site() -> Site:
    """Run the real code for every chapter and assemble the booklet."""
    started = time.perf_counter()
    files: dict[str, bytes] = {"index.html": _index(), "favicon.png": _favicon()}
    for chapter in CHAPTERS:
        own = chapter.page.removesuffix(".html")
        body = (ASSETS_DIR / chapter.page).read_text(encoding="utf-8")
        files[chapter.page] = _page(
            chapter.page, chapter.title, body, ("booklet.js", *chapter.data, f"{own}.js")
        )
    for name in STATIC_ASSETS:
        files[name] = (ASSETS_DIR / name).read_bytes()
    traces = swim.all_traces()
    files["data/swim-index.js"] = _data_script(
        "swim",
        {
            "sizes": list(swim.SIZES),
            "losses": list(swim.LOSSES),
            "runs": {key: f"data/swim-{key}.js" for key in traces},
        },
    )
    for key, trace in traces.items():
        files[f"data/swim-{key}.js"] = _swim_script(key, trace)
    files["data/crdt.js"] = _data_script("crdt", crdt.explore())
    files["data/scoring.js"] = _data_script("scoring", scoring.precomputed_tables())
    return Site(files=files, build_seconds=time.perf_counter() - started)


def write_site(site: Site, out: Path) -> None:
    """Write every file of ``site`` under ``out`` (created if needed)."""
    for name, content in site.files.items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
