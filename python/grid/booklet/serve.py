"""The booklet over HTTP: its pages, and the scoring API that lets the scoring chapter
combine any slider values (``GET <prefix>/api/scoring?<slider>=<value>&...``).

:func:`booklet_routes` gives GET routes for :class:`grid.runtime.http.Endpoint`; the
booklet is built on the first request (in a worker thread, so a server's event loop keeps
running) and kept in memory.
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
import threading

from aiohttp import web

from grid.booklet import scoring
from grid.booklet.site import Site, build_site
from grid.runtime.http import Handler

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
"""The pages load nothing but the booklet's own files and talk to nobody but its API."""

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}


class _Built:
    """The booklet of this process, built by the first caller that needs it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._site: Site | None = None

    def get(self) -> Site:
        with self._lock:
            if self._site is None:
                self._site = build_site()
            return self._site


booklet_site = _Built().get
"""The booklet, built once per process."""


def _headers(content_type: str) -> dict[str, str]:
    return {
        "Content-Type": content_type,
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-cache",
    }


def _json(status: int, document: object) -> web.Response:
    body = json.dumps(document, ensure_ascii=False, allow_nan=False).encode()
    return web.Response(
        status=status, body=body, headers=_headers("application/json; charset=utf-8")
    )


def booklet_routes(prefix: str = "/booklet") -> dict[str, Handler]:
    """GET routes serving the booklet under ``prefix`` (no trailing slash): the pages
    and assets, ``<prefix>/api/scoring``, and ``<prefix>`` redirected to ``<prefix>/``."""
    prefix = prefix.rstrip("/")
    if not prefix.startswith("/"):
        raise ValueError(f"the booklet's prefix must start with '/', got {prefix!r}")

    async def redirect(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(f"{prefix}/")

    async def page(request: web.Request) -> web.StreamResponse:
        name = request.match_info.get("path") or "index.html"
        site = await asyncio.to_thread(booklet_site)
        content = site.files.get(name)
        if content is None:
            return web.Response(status=404, text=f"no page {name!r} in the booklet\n")
        suffix = name[name.rfind(".") :]
        content_type = (
            _TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
        )
        response = web.Response(body=content, headers=_headers(content_type))
        # The recorded runs and tables are repetitive JSON: gzip makes them a tenth.
        response.enable_compression()
        return response

    async def scoring_api(request: web.Request) -> web.StreamResponse:
        try:
            repeated = [key for key in request.query if len(request.query.getall(key)) > 1]
            if repeated:
                raise scoring.BookletQueryError(f"{repeated[0][:40]!r} is given more than once")
            inputs = scoring.parse_query(dict(request.query))
            answer = await asyncio.to_thread(scoring.answer, inputs)
        except scoring.BookletQueryError as error:
            return _json(400, {"error": str(error)})
        return _json(200, answer)

    return {
        prefix: redirect,
        f"{prefix}/api/scoring": scoring_api,
        f"{prefix}/": page,
        f"{prefix}/{{path:.+}}": page,
    }
