"""``grid booklet``: the Grid Booklet, interactive chapters on SWIM probing, CRDT
convergence and the scoring pipeline, as a static site (``--out``) or served with its
scoring API (``--serve``)."""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from aiohttp import web

from grid.booklet.serve import booklet_routes, booklet_site
from grid.booklet.site import CHAPTERS, write_site
from grid.errors import ConfigError
from grid.models.fields import split_host_port
from grid.runtime.http import Endpoint

EXIT_OK = 0
EXIT_USAGE = 2
DEFAULT_LISTEN = "127.0.0.1:8088"
PREFIX = "/booklet"


class BookletError(ConfigError):
    """The booklet cannot be written or served as asked."""


def register(subparsers: Any) -> None:
    """Add ``grid booklet``."""
    parser = subparsers.add_parser(
        "booklet",
        help="write or serve the Grid Booklet: interactive SWIM, CRDT and scoring chapters",
        description="Builds the booklet from Grid's own code (recorded SWIM simulator runs, "
        "CRDT states, scoring explanations) as a static site that opens from file:// "
        "(--out), or serves it with the scoring API that combines any slider values "
        "(--serve). Exit status: 0 written or served until interrupted, 2 --out cannot be "
        "written or --listen cannot be used. More: grid docs booklet.",
    )
    parser.add_argument(
        "--out", type=Path, metavar="DIR", help="write the site here (created if needed)"
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help=f"serve the booklet under {PREFIX}/ until interrupted",
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=DEFAULT_LISTEN,
        help=f"where --serve listens (default {DEFAULT_LISTEN}; port 0 picks a free one)",
    )
    parser.set_defaults(handler=booklet_command)


def booklet_command(args: argparse.Namespace) -> int:
    if args.out is None and not args.serve:
        print("grid: booklet needs --out DIR or --serve (or both)", file=sys.stderr)
        return EXIT_USAGE
    try:
        listen = parse_listen(args.listen) if args.serve else None
        if args.out is not None:
            _prepare_output(args.out)
            site = booklet_site()
            write_site(site, args.out)
            total = sum(len(content) for content in site.files.values())
            print(
                f"wrote the booklet to {args.out}: {len(site.files)} files, "
                f"{total / 1024:.0f} KiB, built in {site.build_seconds:.2f} s; "
                f"open {args.out / 'index.html'}"
            )
            for chapter in CHAPTERS:
                weight = site.chapter_bytes(chapter) / 1024
                print(f"  {chapter.page}: {chapter.title}, {weight:.0f} KiB with its data")
            sys.stdout.flush()
        if listen is not None:
            asyncio.run(_serve(*listen))
    except BookletError as error:
        print(f"grid: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def parse_listen(address: str) -> tuple[str, int]:
    """Host and port of ``--listen``; port 0 asks the system for a free one."""
    host, _, port = address.rpartition(":")
    checked = f"{host}:1" if port == "0" else address
    try:
        host, number = split_host_port(checked)
    except ValueError as error:
        raise BookletError(f"--listen {address!r}: {error}") from None
    return host, 0 if port == "0" else number


def _prepare_output(out: Path) -> None:
    try:
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out, prefix=".grid-booklet-"):
            pass
    except OSError as error:
        reason = error.strerror or str(error)
        raise BookletError(f"cannot write the booklet to {out}: {reason}") from None


async def _serve(host: str, port: int) -> None:
    async def home(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(f"{PREFIX}/")

    endpoint = Endpoint(host, port, {"/": home, **booklet_routes(PREFIX)}, error=BookletError)
    await endpoint.start()
    address = endpoint.address
    print(f"serving the booklet at http://{address}{PREFIX}/ (Ctrl-C stops)", flush=True)
    # Build now rather than on the first request, so the first page comes at once.
    await asyncio.to_thread(booklet_site)
    try:
        await asyncio.Event().wait()
    finally:
        await endpoint.stop()
