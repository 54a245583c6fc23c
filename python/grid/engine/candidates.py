"""The candidates a site's gateway is offered: this site's own providers (and those tied to
no site), built from resources exactly as ``grid render`` builds them, plus the providers
that trusted peers publish, built from their replicated records. Pure."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from grid.crdt.records import LabelSelector as RecordSelector
from grid.crdt.state import ProviderEntry
from grid.errors import ScoringInputError
from grid.models.common import BackendKind
from grid.models.network import GatewayRef, GridNetwork
from grid.models.provider import InferenceProvider
from grid.models.resources import LoadedResources
from grid.models.selectors import LabelSelector
from grid.models.site import GridSite
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
) -> WhatIf:
    """This site's own candidates: ``providers`` (those sitting at this site and those tied
    to no site) with the signals observed here. Raises :class:`~grid.errors.ConfigError`
    when the resources cannot be rendered (two endpoints for one cluster, a bad name)."""
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
    )


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
    site: RemoteSite, entry: ProviderEntry, selectors: SelectorCache
) -> tuple[CandidateInput, ...] | str:
    """One published provider's candidates (one per model), or why it cannot be offered."""
    record = entry.record
    spec = record.spec
    metrics = record.metrics
    healthy = False if record.phase == UNAVAILABLE else metrics.healthy
    cost = spec.cost
    try:
        policy = None if spec.access_policy is None else selectors.get(spec.access_policy)
        return tuple(
            CandidateInput(
                provider=record.name,
                model=model.name,
                site=site.name,
                cluster=site.cluster,
                backend_kind=BackendKind(spec.backend_kind),
                geography=site.geography,
                metrics=Metrics(
                    queue_depth=metrics.queue_depth,
                    kv_cache_utilization=metrics.kv_cache_utilization,
                    prefix_cache_hit_ratio=metrics.prefix_cache_hit_ratio,
                    p99_latency_ms=metrics.p99_latency_ms,
                ),
                cost=None
                if cost is None
                else TokenCost(Decimal(cost.input_per_million), Decimal(cost.output_per_million)),
                healthy=healthy,
                degraded=record.phase == DEGRADED or site.suspect,
                updated_at=datetime.fromtimestamp(entry.updated_at, UTC),
                access_policy=policy,
            )
            for model in record.models
        )
    except (ScoringInputError, ValueError) as error:
        return f"record from site {site.name!r} unusable: {error}"


@dataclass(slots=True)
class _SiteCandidates:
    site: RemoteSite
    stamp: int
    by_provider: dict[str, tuple[ProviderEntry, tuple[CandidateInput, ...] | str]]
    candidates: list[CandidateInput]
    refused: list[tuple[str, str]]


class RemoteCandidates:
    """Every trusted peer's candidates, kept between ranking passes. A peer's list is built
    again only when its providers changed (the state's stamp for the site moved) or what
    this site knows of the peer did (its geography, egress, suspicion), and then only the
    providers whose entry changed are converted: at 100 sites x 100 providers a pass would
    otherwise build 10,000 candidates to use a handful of new ones."""

    def __init__(self) -> None:
        self._selectors = SelectorCache()
        self._sites: dict[str, _SiteCandidates] = {}

    def of(
        self, site: RemoteSite, stamp: int | None, entries: Callable[[], Iterable[ProviderEntry]]
    ) -> tuple[list[CandidateInput], list[tuple[str, str]]]:
        """``site``'s candidates and refusals; ``entries`` is called only when they must be
        built again. Callers must not change the lists returned."""
        if stamp is None:
            self._sites.pop(site.name, None)
            return [], []
        held = self._sites.get(site.name)
        if held is not None and held.stamp == stamp and held.site == site:
            return held.candidates, held.refused
        reusable = held.by_provider if held is not None and held.site == site else {}
        by_provider: dict[str, tuple[ProviderEntry, tuple[CandidateInput, ...] | str]] = {}
        candidates: list[CandidateInput] = []
        refused: list[tuple[str, str]] = []
        for entry in entries():
            name = entry.record.name
            built = reusable.get(name)
            if built is None or built[0] is not entry:
                built = (entry, _provider_candidates(site, entry, self._selectors))
            by_provider[name] = built
            offered = built[1]
            if isinstance(offered, str):
                refused.append((name, offered))
            else:
                candidates.extend(offered)
        self._sites[site.name] = _SiteCandidates(site, stamp, by_provider, candidates, refused)
        return candidates, refused

    def keep_only(self, sites: Iterable[str]) -> None:
        """Forget every peer but ``sites`` (those offered in the latest pass)."""
        live = set(sites)
        for name in set(self._sites) - live:
            del self._sites[name]
