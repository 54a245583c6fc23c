"""The live view over HTTP: ``/`` (one page: HTML, CSS and script inline, nothing fetched
from elsewhere) and ``/view.json`` (the document the page polls every second; see
:mod:`grid.view.model`).

The page is strictly read-only and locked down by its Content-Security-Policy: it runs
only its own script and style (by hash), talks only to its own origin, and is never framed.

Keeping the view cheap for a busy site: the member history is sampled a few times a
second; the gateways' explanations are computed again only when the engine ranked anew;
the route matrix (one real ranking per consuming site) at once when a consuming site comes
or goes, else at most every ``matrix_interval_s`` for new signals; both off the event loop,
from immutable values."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from aiohttp import web

from grid.runtime.http import Handler
from grid.scoring.ranking import Ranking
from grid.view.history import DEFAULT_CAPACITY, MemberHistory
from grid.view.model import (
    NetworkSource,
    consumers,
    network_document,
    ranking_part,
    route_matrix,
    view_document,
)

SAMPLE_INTERVAL_S = 0.2
MATRIX_INTERVAL_S = 5.0
_ASSETS = ("page.html", "view.css", "view.js")


def _asset(name: str) -> str:
    return resources.files("grid.view").joinpath(name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


@dataclass(frozen=True, slots=True)
class Page:
    """The page as served, and the policy that lets only its own style and script run."""

    html: str
    policy: str

    @classmethod
    def build(cls) -> Page:
        page, style, script = (_asset(name) for name in _ASSETS)
        html = page.replace("/*STYLE*/", style).replace("/*SCRIPT*/", script)
        policy = "; ".join(
            (
                "default-src 'none'",
                "connect-src 'self'",
                "img-src 'self' data:",
                f"style-src '{_sha256(style)}'",
                f"script-src '{_sha256(script)}'",
                "base-uri 'none'",
                "form-action 'none'",
                "frame-ancestors 'none'",
            )
        )
        return cls(html, policy)


@dataclass(slots=True)
class _Cached:
    ranking: Ranking | None
    overlays: tuple[object, ...]
    ranked: dict[str, Any]
    matrix: dict[str, Any] | None = None
    matrix_ranking: Ranking | None = None
    matrix_sites: tuple[str, ...] = ()
    matrix_at: float = float("-inf")


def _same(old: Sequence[object], new: Sequence[object]) -> bool:
    """The engine replaces an overlay whenever it changes: identity says enough."""
    return len(old) == len(new) and all(a is b for a, b in zip(old, new, strict=True))


class LiveView:
    """The view of a shell (``role``: ``agent`` or ``operator``) over the networks
    ``sources`` returns. :meth:`start` the member sampler; :meth:`routes` for the shell's
    HTTP endpoint; :meth:`stop`."""

    def __init__(
        self,
        role: str,
        sources: Callable[[], Sequence[NetworkSource]],
        *,
        links: Mapping[str, str] | None = None,
        history_capacity: int = DEFAULT_CAPACITY,
        matrix_interval_s: float = MATRIX_INTERVAL_S,
    ) -> None:
        self.role = role
        self._sources = sources
        self.links = dict(links or {})
        self._capacity = history_capacity
        self._matrix_interval_s = matrix_interval_s
        self._histories: dict[str, MemberHistory] = {}
        self._cache: dict[str, _Cached] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._sampler: asyncio.Task[None] | None = None
        self._page: Page | None = None

    # -- the member history -------------------------------------------------------------

    def history(self, network: str) -> MemberHistory:
        history = self._histories.get(network)
        if history is None:
            history = self._histories[network] = MemberHistory(self._capacity)
        return history

    def sample(self) -> None:
        """Record the member transitions of every network since the last sample."""
        sources = self._sources()
        for source in sources:
            if source.engine is not None:
                self.history(source.name).observe(source.engine.members)
        live = {source.name for source in sources}
        for gone in set(self._histories) - live:
            del self._histories[gone]
            self._cache.pop(gone, None)

    async def start(self) -> None:
        if self._sampler is None:
            self.sample()
            self._sampler = asyncio.create_task(self._sample_loop(), name="grid-view-sampler")

    async def stop(self) -> None:
        task, self._sampler = self._sampler, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _sample_loop(self) -> None:
        while True:
            await asyncio.sleep(SAMPLE_INTERVAL_S)
            self.sample()

    # -- the document -------------------------------------------------------------------

    async def document(self, now: datetime) -> dict[str, Any]:
        """The view at ``now``."""
        self.sample()
        networks = []
        for source in self._sources():
            lock = self._locks.setdefault(source.name, asyncio.Lock())
            async with lock:
                networks.append(await self._network(source, now))
        return view_document(self.role, networks, now, links=self.links)

    async def _network(self, source: NetworkSource, now: datetime) -> dict[str, Any]:
        engine = source.engine
        history = self.history(source.name)
        if engine is None:
            return network_document(source, history, now)
        ranking = engine.ranking
        overlays = tuple(engine.overlays.values())
        cached = self._cache.get(source.name)
        if cached is None or cached.ranking is not ranking or not _same(cached.overlays, overlays):
            ranked = await asyncio.to_thread(ranking_part, overlays, ranking, engine.not_offered)
            previous = cached
            cached = self._cache[source.name] = _Cached(ranking, overlays, ranked)
            if previous is not None:
                cached.matrix = previous.matrix
                cached.matrix_ranking = previous.matrix_ranking
                cached.matrix_sites = previous.matrix_sites
                cached.matrix_at = previous.matrix_at
        moment = now.timestamp()
        sites = consumers(engine)
        # A site that came or went changes the rows at once; new signals wait their turn.
        due = moment - cached.matrix_at >= self._matrix_interval_s
        if (
            cached.matrix is None
            or tuple(sites) != cached.matrix_sites
            or (cached.matrix_ranking is not ranking and due)
        ):
            matrix = await asyncio.to_thread(route_matrix, ranking, sites, engine.network, now)
            cached.matrix = matrix | {"computedAt": now.isoformat()}
            cached.matrix_ranking, cached.matrix_at = ranking, moment
            cached.matrix_sites = tuple(sites)
        return network_document(source, history, now, ranked=cached.ranked, matrix=cached.matrix)

    # -- HTTP ---------------------------------------------------------------------------

    def routes(self) -> dict[str, Handler]:
        """``/`` and ``/view.json``."""
        return {"/": self._serve_page, "/view.json": self._serve_document}

    async def _serve_page(self, request: web.Request) -> web.Response:
        if self._page is None:
            self._page = Page.build()
        return web.Response(
            text=self._page.html,
            content_type="text/html",
            charset="utf-8",
            headers={
                "Content-Security-Policy": self._page.policy,
                "Cache-Control": "no-store",
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
            },
        )

    async def _serve_document(self, request: web.Request) -> web.Response:
        document = await self.document(datetime.now(UTC))
        return web.Response(
            body=json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode(),
            content_type="application/json",
            headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
        )
