"""The candidates a site's gateway is offered: this site's own providers (and those tied to
no site), built from resources exactly as ``grid render`` builds them, plus the providers
that trusted peers publish, built from their replicated records. Pure."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from itertools import chain

from grid.crdt.records import LabelSelector as RecordSelector
from grid.crdt.site_records import ProviderEntry
from grid.crdt.state import GridState
from grid.errors import ScoringInputError
from grid.models.common import BackendKind
from grid.models.network import GatewayRef, GridNetwork
from grid.models.provider import InferenceProvider
from grid.models.resources import LoadedResources
from grid.models.selectors import LabelSelector
from grid.models.site import GridSite
from grid.oauth.rotation import TokenKeys
from grid.observe.signals import Signals
from grid.render.consumer import ClusterEndpoint
from grid.render.whatif import (
    REMOTE_CLUSTER_PREFIX,
    MetricsReport,
    ProviderReport,
    WhatIf,
    build_what_if,
)
from grid.scoring.inputs import CandidateInput, Geography, Metrics, TokenCost

UNAVAILABLE = "Unavailable"
_MAX_CACHED_SELECTORS = 4096
DEGRADED = "Degraded"


@dataclass(frozen=True, slots=True)
class LocalView:
    """What this site observed of one of its providers, as scoring needs it."""

    healthy: bool | None
    degraded: bool
    signals: Signals | None


def local_candidates(
    network: GridNetwork,
    *,
    gateway: GatewayRef,
    site_name: str,
    local_site: GridSite | None,
    providers: Iterable[InferenceProvider],
    views: Mapping[str, LocalView],
    token_keys: Mapping[str, TokenKeys] | None = None,
) -> WhatIf:
    """This site's own candidates: ``providers`` (those sitting at this site and those tied
    to no site) with the signals observed here, and the headers of the Custom values
    ``token_keys`` names. Raises :class:`~grid.errors.ConfigError` when the resources cannot
    be rendered (two endpoints for one cluster, a bad name)."""
    resources: list[GridNetwork | GridSite | InferenceProvider] = [network]
    if local_site is not None:
        resources.append(local_site)
    offered = list(providers)
    resources.extend(offered)
    reports: dict[str, ProviderReport] = {}
    for provider in offered:
        view = views.get(provider.metadata.name)
        if view is None:
            continue
        signals = view.signals or Signals()
        reports[provider.metadata.name] = ProviderReport(
            queue_depth=signals.queue_depth,
            kv_cache_utilization=signals.kv_cache_utilization,
            prefix_cache_hit_ratio=signals.prefix_cache_hit_ratio,
            p99_latency_ms=signals.p99_latency_ms,
            healthy=view.healthy,
            degraded=view.degraded,
        )
    return build_what_if(
        LoadedResources(resources=tuple(resources)),
        site=site_name,
        gateway=gateway.name,
        namespace=gateway.namespace,
        metrics=MetricsReport(providers=reports),
        rendered_headers={
            name: header
            for name, keys in (token_keys or {}).items()
            if (header := keys.header_of(keys.reference)) is not None
        },
    )


class LocalCandidates:
    """This site's own candidates, kept between renders: what :func:`local_candidates`
    returns, but while the network, the gateway, the local GridSite and the providers are
    the objects of the last build, only the providers whose view is a new object are built
    again (the engine replaces a view that changed, never changes one in place). A
    provider's candidates depend on nothing else, and what the build checks across
    providers (one endpoint per cluster) on nothing that changes with a view. At 100
    providers, building them all was a tenth of a render."""

    __slots__ = ("_basis", "_by_provider", "_views", "_what_if")

    def __init__(self) -> None:
        self._basis: tuple[object, ...] = ()
        self._views: dict[str, LocalView | None] = {}
        self._by_provider: dict[str, tuple[CandidateInput, ...]] = {}
        self._what_if: WhatIf | None = None

    def of(
        self,
        network: GridNetwork,
        *,
        gateway: GatewayRef,
        site_name: str,
        local_site: GridSite | None,
        providers: tuple[InferenceProvider, ...],
        views: Mapping[str, LocalView],
        token_keys: Mapping[str, TokenKeys] | None = None,
    ) -> WhatIf:
        """What ``local_candidates`` returns for the same arguments (and raises the same
        :class:`~grid.errors.ConfigError`); ``providers`` in name order. ``token_keys``
        changes at a rotation's steps only (the engine keeps the same mapping between)."""

        def build(offered: Iterable[InferenceProvider]) -> WhatIf:
            return local_candidates(
                network,
                gateway=gateway,
                site_name=site_name,
                local_site=local_site,
                providers=offered,
                views=views,
                token_keys=token_keys,
            )

        basis = (network, gateway, site_name, local_site, providers, token_keys)
        held = self._what_if
        if held is None or not all(map(operator.is_, basis, self._basis)):
            built = build(providers)
            self._basis = basis
            self._by_provider = {provider.metadata.name: () for provider in providers}
            self._views = {name: views.get(name) for name in self._by_provider}
            self._file(built)
            self._what_if = built
            return built
        changed = [
            provider
            for provider in providers
            if views.get(provider.metadata.name) is not self._views[provider.metadata.name]
        ]
        if not changed:
            return held
        rebuilt = build(changed)
        for provider in changed:
            name = provider.metadata.name
            self._by_provider[name] = ()
            self._views[name] = views.get(name)
        self._file(rebuilt)
        held = replace(held, candidates=tuple(chain.from_iterable(self._by_provider.values())))
        self._what_if = held
        return held

    def _file(self, built: WhatIf) -> None:
        """Hold ``built``'s candidates under their providers (emptied beforehand)."""
        for candidate in built.candidates:
            self._by_provider[candidate.provider] += (candidate,)


@dataclass(frozen=True, slots=True)
class RemoteSite:
    """A trusted peer whose providers are offered through its egress gateway."""

    name: str
    geography: Geography
    endpoint: ClusterEndpoint
    suspect: bool = False
    """SWIM suspects the site: its candidates stay, published as not fresh."""

    @property
    def cluster(self) -> str:
        """The gateway cluster that reaches the site (as ``grid render`` names it)."""
        return f"{REMOTE_CLUSTER_PREFIX}{self.name}"


class SelectorCache:
    """Replicated access policies converted once per distinct policy, since every ranking
    pass needs them for every remote candidate."""

    def __init__(self) -> None:
        self._converted: dict[RecordSelector, LabelSelector] = {}

    def get(self, selector: RecordSelector) -> LabelSelector:
        converted = self._converted.get(selector)
        if converted is None:
            if len(self._converted) >= _MAX_CACHED_SELECTORS:
                self._converted.clear()
            converted = LabelSelector.model_validate(selector.as_kubernetes(), by_alias=True)
            self._converted[selector] = converted
        return converted


def remote_candidates(
    site: RemoteSite, entries: Iterable[ProviderEntry], selectors: SelectorCache
) -> tuple[list[CandidateInput], list[tuple[str, str]]]:
    """The candidates of ``site``'s published providers, and (provider, reason) for each
    record that cannot be offered."""
    candidates: list[CandidateInput] = []
    refused: list[tuple[str, str]] = []
    for entry in entries:
        offered = _provider_candidates(site, entry, selectors)
        if isinstance(offered, str):
            refused.append((entry.record.name, offered))
        else:
            candidates.extend(offered)
    return candidates, refused


def _provider_candidates(
    site: RemoteSite,
    entry: ProviderEntry,
    selectors: SelectorCache,
    previous: tuple[ProviderEntry, tuple[CandidateInput, ...] | str] | None = None,
) -> tuple[CandidateInput, ...] | str:
    """One published provider's candidates (one per model), or why it cannot be offered.
    ``previous`` is what this site built from the provider's last entry: when only its
    signals changed since, its candidates are observed anew rather than built again."""
    record = entry.record
    spec = record.spec
    metrics = record.metrics
    healthy = False if record.phase == UNAVAILABLE else metrics.healthy
    degraded = record.phase == DEGRADED or site.suspect
    updated_at = datetime.fromtimestamp(entry.updated_at, UTC)
    observed = Metrics(
        queue_depth=metrics.queue_depth,
        kv_cache_utilization=metrics.kv_cache_utilization,
        prefix_cache_hit_ratio=metrics.prefix_cache_hit_ratio,
        p99_latency_ms=metrics.p99_latency_ms,
    )
    try:
        if previous is not None and not isinstance(previous[1], str):
            before = previous[0].record
            if before.spec is spec and before.models is record.models:
                return tuple(
                    candidate.observed(
                        metrics=observed, healthy=healthy, degraded=degraded, updated_at=updated_at
                    )
                    for candidate in previous[1]
                )
        cost = spec.cost
        policy = None if spec.access_policy is None else selectors.get(spec.access_policy)
        return tuple(
            CandidateInput(
                provider=record.name,
                model=model.name,
                site=site.name,
                cluster=site.cluster,
                backend_kind=BackendKind(spec.backend_kind),
                geography=site.geography,
                metrics=observed,
                cost=None
                if cost is None
                else TokenCost(Decimal(cost.input_per_million), Decimal(cost.output_per_million)),
                healthy=healthy,
                degraded=degraded,
                updated_at=updated_at,
                access_policy=policy,
            )
            for model in record.models
        )
    except (ScoringInputError, ValueError) as error:
        return f"record from site {site.name!r} unusable: {error}"


_Built = tuple[ProviderEntry, tuple[CandidateInput, ...] | str]
"""A provider's entry as last read, and its candidates (or why it cannot be offered)."""


@dataclass(slots=True)
class _SiteCandidates:
    site: RemoteSite
    stamp: int
    by_provider: dict[str, _Built] = field(default_factory=dict)
    by_model: dict[str, dict[str, CandidateInput]] = field(default_factory=dict)
    """Each model's candidates, by provider."""
    routes: dict[str, tuple[CandidateInput, ...]] = field(default_factory=dict)
    """Each model's candidates as one route: a new tuple only when one of them changed."""
    refused: dict[str, str] = field(default_factory=dict)
    blocks: tuple[tuple[CandidateInput, ...], ...] = ()
    refusals: tuple[tuple[str, str], ...] = ()


class RemoteCandidates:
    """Every trusted peer's candidates, kept between ranking passes, one route per model
    (the peer's egress reaches all of a model's providers there). Only the providers whose
    entry changed since the last pass are read again (``GridState.provider_changes``),
    and a route is a new object only when one of its candidates changed, so ranking skips
    the others (``rank_candidates(routes=...)``); everything is read again when what this
    site knows of the peer (its geography, egress, suspicion) changed. At 100 sites x 100
    providers a pass would otherwise read and build 10,000 candidates to use a few hundred
    new ones."""

    def __init__(self) -> None:
        self._selectors = SelectorCache()
        self._sites: dict[str, _SiteCandidates] = {}

    def of(
        self, site: RemoteSite, state: GridState
    ) -> tuple[tuple[tuple[CandidateInput, ...], ...], tuple[tuple[str, str], ...]]:
        """``site``'s candidates, one tuple per route, and (provider, reason) for each
        record that cannot be offered, by provider."""
        stamp = state.providers_stamp(site.name)
        if stamp is None:
            self._sites.pop(site.name, None)
            return (), ()
        held = self._sites.get(site.name)
        changed = None
        if held is None or held.site != site:
            held = _SiteCandidates(site, stamp)
            self._sites[site.name] = held
        elif held.stamp == stamp:
            return held.blocks, held.refusals
        else:
            changed = state.provider_changes(site.name, held.stamp)
        held.stamp = stamp
        models: set[str] = set()
        if changed is None:
            entries = {entry.record.name: entry for entry in state.providers(site.name)}
            for name in set(held.by_provider) - set(entries):
                self._take(held, name, None, models)
            for name, entry in entries.items():
                self._take(held, name, entry, models)
        else:
            for name in changed:
                self._take(held, name, state.provider(site.name, name), models)
        for model in models:
            members = held.by_model.get(model)
            if members:
                held.routes[model] = tuple(members.values())
            else:
                held.by_model.pop(model, None)
                held.routes.pop(model, None)
        held.blocks = tuple(held.routes.values())
        held.refusals = tuple(sorted(held.refused.items()))
        return held.blocks, held.refusals

    def _take(
        self, held: _SiteCandidates, name: str, entry: ProviderEntry | None, models: set[str]
    ) -> None:
        """Bring provider ``name`` up to ``entry`` (None: gone), noting the models whose
        routes changed."""
        previous = held.by_provider.get(name)
        if previous is not None:
            if previous[0] is entry:
                return
            if isinstance(previous[1], str):
                del held.refused[name]
            else:
                for candidate in previous[1]:
                    held.by_model[candidate.model].pop(name, None)
                    models.add(candidate.model)
        if entry is None:
            held.by_provider.pop(name, None)
            return
        built = _provider_candidates(held.site, entry, self._selectors, previous)
        held.by_provider[name] = (entry, built)
        if isinstance(built, str):
            held.refused[name] = built
            return
        for candidate in built:
            held.by_model.setdefault(candidate.model, {})[name] = candidate
            models.add(candidate.model)

    def keep_only(self, sites: Iterable[str]) -> None:
        """Forget every peer but ``sites`` (those offered in the latest pass)."""
        live = set(sites)
        for name in set(self._sites) - live:
            del self._sites[name]
