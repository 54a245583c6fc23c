"""The candidates a site's gateway is offered: this site's own providers (and those tied to
no site), built from resources exactly as ``grid render`` builds them, plus the providers
that trusted peers publish, built from their replicated records. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
        record = entry.record
        spec = record.spec
        metrics = record.metrics
        healthy = False if record.phase == UNAVAILABLE else metrics.healthy
        cost = spec.cost
        try:
            policy = None if spec.access_policy is None else selectors.get(spec.access_policy)
            offered = [
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
                    else TokenCost(
                        Decimal(cost.input_per_million), Decimal(cost.output_per_million)
                    ),
                    healthy=healthy,
                    degraded=record.phase == DEGRADED or site.suspect,
                    updated_at=datetime.fromtimestamp(entry.updated_at, UTC),
                    access_policy=policy,
                )
                for model in record.models
            ]
        except (ScoringInputError, ValueError) as error:
            refused.append((record.name, f"record from site {site.name!r} unusable: {error}"))
            continue
        candidates.extend(offered)
    return candidates, refused
